"""Prometheus samples scraped from an app's `/metrics`, and the change of one between two scrapes."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass(frozen=True)
class Scrape:
    text: str
    samples: Samples


async def scrape_text(client: httpx.AsyncClient) -> Scrape:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return Scrape(response.text, samples)


async def scrape(client: httpx.AsyncClient) -> Samples:
    return (await scrape_text(client)).samples


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)
