"""The GC's stop-the-world pauses reach /metrics, by generation, and their buffer is bounded."""

from __future__ import annotations

import asyncio
import gc

import httpx
from prometheus_client import REGISTRY

from agent_runtime.observability.gc_pauses import GcPauses


def _count(generation: str) -> float:
    return REGISTRY.get_sample_value("agent_runtime_gc_pause_seconds_count", {"generation": generation}) or 0.0


def _sum(generation: str) -> float:
    return REGISTRY.get_sample_value("agent_runtime_gc_pause_seconds_sum", {"generation": generation}) or 0.0


def test_each_collection_is_observed_with_its_generation_and_duration() -> None:
    pauses = GcPauses()
    pauses.install()
    try:
        before_full, before_young, before_sum = _count("2"), _count("0"), _sum("2")
        gc.collect(2)
        gc.collect(0)
        gc.collect(2)
    finally:
        pauses.uninstall()
    drained = pauses.drain()
    # Allocations between the explicit collections may trigger young ones of their own: at least ours.
    assert drained >= 3
    assert _count("2") >= before_full + 2
    assert _count("0") >= before_young + 1
    assert _sum("2") > before_sum
    assert pauses.drain() == 0


def test_nothing_is_recorded_once_uninstalled() -> None:
    pauses = GcPauses()
    pauses.install()
    pauses.uninstall()
    gc.collect(2)
    assert pauses.drain() == 0


def test_undrained_pauses_are_bounded_at_three_times_the_limit() -> None:
    pauses = GcPauses(max_pending=10)
    pauses.install()
    try:
        for _ in range(30):
            gc.collect(0)
    finally:
        pauses.uninstall()
    assert pauses.drain() == 10


async def test_the_running_service_reports_gc_pauses_on_metrics(client: httpx.AsyncClient) -> None:
    gc.collect(2)
    text = ""
    for _ in range(100):  # the sampler drains twice a second; polled, with a bound instead of a hang
        text = (await client.get("/metrics")).text
        if 'agent_runtime_gc_pause_seconds_count{generation="2"}' in text:
            break
        await asyncio.sleep(0.05)
    assert 'agent_runtime_gc_pause_seconds_bucket{generation="2",le="0.001"}' in text
