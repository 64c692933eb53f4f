from __future__ import annotations

import asyncpg
import httpx
import pytest
from tests.conftest import User

DEFAULT_SETTINGS = {
    "version": 2,
    "preferences": {
        "interface_language": "zh-CN",
        "ai_language": "zh-CN",
        "timezone": "Asia/Shanghai",
        "country": "CN",
    },
    "privacy": {},
    "notification": {},
    "safety": {},
    "memory": {"enabled": True},
}


async def test_missing_profile_reads_as_defaults(client: httpx.AsyncClient, user: User) -> None:
    response = await client.get("/v1/profile", headers=user.headers)
    assert response.status_code == 200
    assert response.json() == {
        "user_id": str(user.id),
        "username": "",
        "bio": None,
        "settings": DEFAULT_SETTINGS,
        "created_at": None,
        "updated_at": None,
    }


async def test_put_then_get(client: httpx.AsyncClient, user: User) -> None:
    body = {
        "username": "阿芽",
        "bio": "hello",
        "settings": {
            "version": 2,
            "preferences": {"ai_language": "en-US", "timezone": "Europe/Paris", "country": "FR"},
        },
    }
    put = await client.put("/v1/profile", json=body, headers=user.headers)
    assert put.status_code == 200
    got = (await client.get("/v1/profile", headers=user.headers)).json()
    assert got == put.json()
    assert got["settings"] == {
        **DEFAULT_SETTINGS,
        "preferences": {
            "interface_language": "zh-CN",
            "ai_language": "en-US",
            "timezone": "Europe/Paris",
            "country": "FR",
        },
    }
    assert got["username"] == "阿芽" and got["created_at"] is not None


async def test_v1_write_is_upgraded_and_missing_version_means_v1(client: httpx.AsyncClient, user: User) -> None:
    body = {"username": "u", "settings": {"preferences": {"country": "JP"}, "privacy": {"share": False}}}
    response = await client.put("/v1/profile", json=body, headers=user.headers)
    assert response.status_code == 200
    settings = response.json()["settings"]
    assert settings["version"] == 2
    assert settings["preferences"]["country"] == "JP"
    assert settings["privacy"] == {"share": False}


async def test_stored_v1_reads_back_and_write_upgrades(
    client: httpx.AsyncClient, user: User, db_pool: asyncpg.Pool
) -> None:
    stored_v1 = {"version": 1, "preferences": {"interface_language": "en-GB", "country": "GB"}}
    await db_pool.execute(
        "INSERT INTO profiles (user_id, username, settings) VALUES ($1, 'old', $2)", user.id, stored_v1
    )
    read = (await client.get("/v1/profile", headers=user.headers)).json()
    assert read["settings"] == {
        "version": 1,
        "preferences": {
            "interface_language": "en-GB",
            "ai_language": "zh-CN",
            "timezone": "Asia/Shanghai",
            "country": "GB",
        },
        "privacy": {},
        "notification": {},
    }
    written = await client.put(
        "/v1/profile", json={"username": "old", "settings": read["settings"]}, headers=user.headers
    )
    assert written.json()["settings"]["version"] == 2
    raw = await db_pool.fetchval("SELECT settings FROM profiles WHERE user_id = $1", user.id)
    assert raw["version"] == 2


async def test_invalid_settings_are_422_naming_the_field(client: httpx.AsyncClient, user: User) -> None:
    cases = {
        "interface_language": "english",
        "ai_language": "zz-!!",
        "timezone": "Mars/Olympus",
        "country": "cn",
    }
    for field, value in cases.items():
        body = {"settings": {"version": 2, "preferences": {field: value}}}
        response = await client.put("/v1/profile", json=body, headers=user.headers)
        assert response.status_code == 422, field
        locs = [d["loc"] for d in response.json()["error"]["details"]]
        assert ["body", "settings", 2, "preferences", field] in locs, locs


@pytest.mark.parametrize(
    ("body", "loc", "kind"),
    [
        pytest.param({"settings": {"version": 9}}, ["body", "settings"], "union_tag_invalid", id="unknown-version"),
        pytest.param({"nickname": "x"}, ["body", "nickname"], "extra_forbidden", id="unknown-field"),
        pytest.param({"username": "x" * 65}, ["body", "username"], "string_too_long", id="username-too-long"),
    ],
)
async def test_unknown_version_and_field_rejected(
    client: httpx.AsyncClient, user: User, body: dict[str, object], loc: list[str], kind: str
) -> None:
    response = await client.put("/v1/profile", json=body, headers=user.headers)
    assert response.status_code == 422
    error = response.json()["error"]
    assert [(d["loc"], d["type"]) for d in error["details"]] == [(loc, kind)]
    assert {k: v for k, v in error.items() if k != "details"} == {
        "code": "validation_error",
        "message": f"invalid request: {'.'.join(loc)}",
        "request_id": response.headers["x-request-id"],
        "error_id": None,
    }
    assert (await client.get("/v1/profile", headers=user.headers)).json()["created_at"] is None  # nothing stored
