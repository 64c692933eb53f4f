"""Stored profiles that today's models reject (rows written by older code, or edited by hand) still read: the field
takes its default, a warning names it, and no request fails on it (engine/profiles/stored.py)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import httpx
import pytest
from tests.conftest import User

DEFAULT_PREFERENCES = {
    "interface_language": "zh-CN",
    "ai_language": "zh-CN",
    "timezone": "Asia/Shanghai",
    "country": "CN",
}
V1_DEFAULTS = {"version": 1, "preferences": DEFAULT_PREFERENCES, "privacy": {}, "notification": {}}
V2_DEFAULTS = {**V1_DEFAULTS, "version": 2, "safety": {}, "memory": {"enabled": True}}

# The stored settings, what GET /v1/profile reads, and the fields the warnings name.
CASES = [
    pytest.param({"version": 1, "theme": "dark"}, V1_DEFAULTS, ["settings.theme"], id="unknown-key"),
    pytest.param(
        {
            "version": 2,
            "preferences": {"country": "ZZ", "timezone": "Mars/Olympus", "ai_language": "en", "font": "big"},
            "privacy": {"share": False},
            "memory": {"enabled": "yes"},
        },
        {
            **V2_DEFAULTS,
            "preferences": {**DEFAULT_PREFERENCES, "ai_language": "en"},
            "privacy": {"share": False},
        },
        [
            "settings.memory.enabled",
            "settings.preferences.country",
            "settings.preferences.font",
            "settings.preferences.timezone",
        ],
        id="values-that-no-longer-validate",
    ),
    pytest.param({"version": 7, "safety": []}, V2_DEFAULTS, ["settings.safety", "settings.version"], id="version"),
    pytest.param({"preferences": "dark"}, V1_DEFAULTS, ["settings.preferences"], id="v1-without-version"),
]


async def _store(db_pool: asyncpg.Pool, user: User, settings: object) -> None:
    await db_pool.execute(
        "INSERT INTO profiles (user_id, username, settings) VALUES ($1, 'old', $2)", user.id, settings
    )


def _fields_warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return sorted(
        {str(r.__dict__["field"]) for r in caplog.records if r.name == "agent_runtime.engine.profiles.stored"}
    )


@pytest.mark.parametrize(("stored", "read", "warned"), CASES)
async def test_a_stored_profile_reads_with_defaults_in_place_of_what_fails(
    client: httpx.AsyncClient,
    user: User,
    db_pool: asyncpg.Pool,
    caplog: pytest.LogCaptureFixture,
    stored: dict[str, Any],
    read: dict[str, Any],
    warned: list[str],
) -> None:
    await _store(db_pool, user, stored)
    response = await client.get("/v1/profile", headers=user.headers)
    assert response.status_code == 200, response.text
    assert response.json()["settings"] == read
    assert _fields_warned(caplog) == warned
    # The row is read, never rewritten by a read.
    assert await db_pool.fetchval("SELECT settings FROM profiles WHERE user_id = $1", user.id) == stored


async def test_a_session_is_created_over_an_unreadable_profile_with_the_default_country(
    client: httpx.AsyncClient, user: User, db_pool: asyncpg.Pool
) -> None:
    await _store(db_pool, user, {"version": 1, "theme": "dark", "preferences": {"country": "ZZ"}})
    created = await client.post("/v1/sessions", headers=user.headers)
    assert created.status_code == 201, created.text
    assert created.json()["billing_country_snapshot"] == "CN"


async def test_runs_finish_over_an_unreadable_profile_and_leave_the_session_free(
    client: httpx.AsyncClient, user: User, db_pool: asyncpg.Pool
) -> None:
    created = await client.post("/v1/sessions", headers=user.headers)
    session_id = created.json()["id"]
    await _store(db_pool, user, {"version": 2, "theme": "dark", "preferences": {"timezone": "Mars/Olympus"}})
    for message in ("what is 12*7?", "and 3*3?"):
        run = await client.post(f"/v1/sessions/{session_id}/runs", json={"message": message}, headers=user.headers)
        assert run.status_code == 200, run.text
        events = [json.loads(line[6:]) for line in run.text.splitlines() if line.startswith("data: ")]
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    session = (await client.get(f"/v1/sessions/{session_id}", headers=user.headers)).json()
    assert session["status"] == "completed"


async def test_a_new_write_refuses_a_country_iso_3166_does_not_assign(client: httpx.AsyncClient, user: User) -> None:
    for country in ("ZZ", "XK", "AA", "UK"):
        body = {"settings": {"version": 2, "preferences": {"country": country}}}
        response = await client.put("/v1/profile", json=body, headers=user.headers)
        assert response.status_code == 422, country
        assert [(d["loc"], d["msg"]) for d in response.json()["error"]["details"]] == [
            (
                ["body", "settings", 2, "preferences", "country"],
                f"Value error, not an assigned ISO 3166-1 alpha-2 country code: '{country}'",
            )
        ]
    accepted = await client.put(
        "/v1/profile", json={"settings": {"version": 2, "preferences": {"country": "GB"}}}, headers=user.headers
    )
    assert accepted.status_code == 200
