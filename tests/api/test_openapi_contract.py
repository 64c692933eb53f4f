"""Where the OpenAPI document and the behaviour could drift apart (each found by schemathesis once)."""

from __future__ import annotations

import re
from typing import Any
from uuid import uuid4

import httpx
import pytest
from jsonschema import Draft202012Validator
from tests.conftest import User


@pytest.fixture(scope="module")
async def spec(client: httpx.AsyncClient) -> dict[str, Any]:
    document: dict[str, Any] = (await client.get("/openapi.json")).json()
    return document


async def test_405_allow_names_every_method_of_the_path(client: httpx.AsyncClient, user: User) -> None:
    response = await client.options("/v1/profile", headers=user.headers)
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD, PUT"  # two FastAPI routes; Starlette named only the first
    session = await client.request("TRACE", "/v1/sessions/3f1a0e4e-8d7c-4b8e-9a51-2c0f7c1c9e11")
    assert session.headers["allow"] == "DELETE, GET, HEAD, PATCH"


@pytest.mark.parametrize("start", ["0.5", "2026-01-01", "2026-01-01T00:00", "2026-01-01T00:00:00"])
async def test_usage_dates_must_be_rfc3339_as_documented(client: httpx.AsyncClient, user: User, start: str) -> None:
    response = await client.get("/v1/usage", params={"start": start}, headers=user.headers)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"] == [
        {
            "loc": ["query", "start"],
            "msg": "must be an RFC 3339 date-time, e.g. 2026-01-01T00:00:00Z",
            "type": "datetime_format",
        }
    ]
    good = await client.get("/v1/usage", params={"start": "2026-01-01T00:00:00.5+08:00"}, headers=user.headers)
    assert good.status_code == 200


@pytest.mark.parametrize(
    ("title", "accepted"),
    [("a", True), (" \u3000x\t", True), ("\x1c", True), ("\ufeff", True), (" ", False), ("\u2028\u3000", False)],
)
async def test_title_pattern_and_check_agree(
    client: httpx.AsyncClient, spec: dict[str, Any], user: User, title: str, accepted: bool
) -> None:
    pattern = spec["components"]["schemas"]["SessionUpdate"]["properties"]["title"]["pattern"]
    assert bool(re.search(pattern, title)) is accepted
    response = await client.post("/v1/sessions", headers=user.headers, json={"title": title})
    assert response.status_code == (201 if accepted else 422), response.text


def test_settings_without_version_can_only_be_v1(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    v2 = next(schemas[name] for name in schemas if name.startswith("ProfileSettingsV2") and "Input" in name)
    assert "version" in v2["required"]
    free_form = v2["properties"]["privacy"]
    assert free_form["propertyNames"] == {"pattern": "^[^\\u0000]*$"}
    assert free_form["additionalProperties"] == {"$ref": "#/components/schemas/ClientJsonValue-Input"}


def test_run_endpoints_document_one_sse_event_and_the_400(spec: dict[str, Any]) -> None:
    for path in ("/v1/sessions/{session_id}/runs", "/v1/agui"):
        responses = spec["paths"][path]["post"]["responses"]
        event = responses["200"]["content"]["text/event-stream"]["schema"]
        assert event["required"] == ["data"] and event["properties"]["data"]["contentMediaType"] == "application/json"
        assert {"400", "401", "404", "408", "409", "413", "422"} <= set(responses)


@pytest.mark.parametrize(("value", "accepted"), [("", False), ("7", False), ("{run}:7", True), ("{run}:\x00", False)])
async def test_last_event_id_query_pattern_and_check_agree(
    client: httpx.AsyncClient, spec: dict[str, Any], user: User, value: str, accepted: bool
) -> None:
    """The query form documented the NUL-free pattern of any client text, so "" looked valid, then was a 422."""
    run = uuid4()
    value = value.format(run=run)
    parameters = spec["paths"]["/v1/sessions/{session_id}/runs/{run_id}/events"]["get"]["parameters"]
    (schema,) = (p["schema"] for p in parameters if p["name"] == "last_event_id")
    (pattern,) = (branch["pattern"] for branch in schema["anyOf"] if "pattern" in branch)
    assert bool(re.search(pattern, value)) is accepted
    response = await client.get(
        f"/v1/sessions/{uuid4()}/runs/{run}/events", params={"last_event_id": value}, headers=user.headers
    )
    # A well-formed id reaches the lookup: the session is not the caller's.
    assert response.status_code == (404 if accepted else 422), response.text


async def test_v1_settings_with_nested_free_form_json_are_valid_and_accepted(
    client: httpx.AsyncClient, spec: dict[str, Any], user: User
) -> None:
    """Schemathesis reported this body as schema-violating and accepted (its shrinker had undone the mutation):
    the document calls it valid, and the server takes it. tests/support/schemathesis_hooks.py drops such
    reports by checking the body sent against the document, as here."""
    body = {"settings": {"notification": {"k": {"": None}}, "version": 1, "preferences": {"ai_language": "zh-CN"}}}
    schema = {"$ref": "#/components/schemas/ProfileUpdate", "components": spec["components"]}
    assert Draft202012Validator(schema).is_valid(body)
    response = await client.put("/v1/profile", json=body, headers=user.headers)
    assert response.status_code == 200, response.text
    assert response.json()["settings"]["notification"] == {"k": {"": None}}
