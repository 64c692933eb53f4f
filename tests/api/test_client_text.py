"""NUL and lone surrogates in every client text field, found by walking the OpenAPI document (not a hand list).

For each operation, each string its body or parameters can carry (nested objects, list items, both branches
of the settings union, the keys and values of free-form objects) gets one request whose other fields are the
smallest valid values: it must be a 422 naming exactly that field, and the caller's profile, sessions and
messages must be unchanged afterwards.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote
from uuid import uuid4

import httpx
import pytest
from fastapi import FastAPI
from tests.conftest import User

from agent_runtime.engine.text import ERROR_TYPE, NO_NUL_PATTERN

NUL = "a\x00b"
SURROGATE = "a\ud800b"

Builder = Callable[[str], Any]


@dataclass(frozen=True)
class Site:
    """One place a client string goes: where pydantic reports it, and how to build a value with `bad` there."""

    loc: tuple[str | int, ...]
    build: Builder
    formatted: bool  # uuid/date-time or patterned strings: refused by their own rule, with its own error type
    branches: tuple[str | int, ...] = ()  # the union tags on the way (not in `loc`; they tell cases apart)


class Walker:
    def __init__(self, document: dict[str, Any]) -> None:
        self.schemas: dict[str, Any] = document["components"]["schemas"]

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = self.schemas[schema["$ref"].rsplit("/", 1)[1]]
        return schema

    def minimal(self, schema: dict[str, Any]) -> Any:
        """The smallest valid value: required members only, defaults and consts where the schema has them."""
        schema = self.resolve(schema)
        if "const" in schema:
            return schema["const"]
        if "default" in schema:
            return schema["default"]
        if "enum" in schema:
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            if key in schema:
                branch = self.resolve(schema[key][0])
                if not {"type", "anyOf", "oneOf", "const"} & branch.keys():
                    # A constraint beside the schema's own members (e.g. which of them are required).
                    return self.minimal({**{k: v for k, v in schema.items() if k != key}, **branch})
                return self.minimal(branch)
        kind = schema.get("type")
        if kind == "object":
            return {name: self.minimal(schema["properties"][name]) for name in schema.get("required", [])}
        if kind == "array":
            return [self.minimal(schema["items"]) for _ in range(schema.get("minItems", 0))]
        if kind == "string":
            return {"uuid": str(uuid4()), "date-time": "2026-01-01T00:00:00Z"}.get(
                schema.get("format", ""), "x" * max(schema.get("minLength", 1), 1)
            )
        return {"integer": schema.get("minimum", 0), "number": 0, "boolean": False, "null": None}[kind]

    def sites(self, schema: dict[str, Any], loc: tuple[str | int, ...] = ()) -> Iterator[Site]:
        schema = self.resolve(schema)
        if "discriminator" in schema:
            yield from self._union_sites(schema, loc)
            return
        for key in ("anyOf", "oneOf"):
            for branch in schema.get(key, []):
                yield from self.sites(branch, loc)
        kind = schema.get("type")
        if kind == "string" and "const" not in schema and "enum" not in schema:
            # A format, or a pattern of its own (e.g. Last-Event-ID's `<run id>:<seq>`), refuses NUL by itself.
            own_rule = "format" in schema or schema.get("pattern", NO_NUL_PATTERN) != NO_NUL_PATTERN
            yield Site(loc, lambda bad: bad, own_rule)
        elif kind == "array":
            for site in self.sites(schema["items"], loc):
                yield Site((*loc, 0, *site.loc[len(loc) :]), _in_list(site.build), site.formatted, site.branches)
        elif kind == "object":
            yield from self._object_sites(schema, loc)

    def _object_sites(self, schema: dict[str, Any], loc: tuple[str | int, ...]) -> Iterator[Site]:
        base = {name: self.minimal(schema["properties"][name]) for name in schema.get("required", [])}
        for name, member in schema.get("properties", {}).items():
            for site in self.sites(member, (*loc, name)):
                yield Site(site.loc, _in_object(base, name, site.build), site.formatted, site.branches)
        if schema.get("additionalProperties", False) is not False:
            # A free-form object (any keys): a bad nested value and a bad key (named with U+FFFD in its place).
            yield Site((*loc, "note", 0, "inner"), lambda bad: {**base, "note": [{"inner": bad}]}, False)
            yield Site((*loc, "a\ufffdb"), lambda bad: {**base, bad: 1}, False)

    def _union_sites(self, schema: dict[str, Any], loc: tuple[str | int, ...]) -> Iterator[Site]:
        tag = schema["discriminator"]["propertyName"]
        for value, ref in schema["discriminator"]["mapping"].items():
            tag_value = int(value) if value.isdigit() else value
            # Reported at its JSON path: the union's tag is not part of it.
            for site in self.sites({"$ref": ref}, loc):
                yield Site(site.loc, _tagged(tag, tag_value, site.build), site.formatted, (tag_value, *site.branches))


def _in_list(build: Builder) -> Builder:
    return lambda bad: [build(bad)]


def _in_object(base: dict[str, Any], name: str, build: Builder) -> Builder:
    return lambda bad: {**base, name: build(bad)}


def _tagged(tag: str, value: object, build: Builder) -> Builder:
    return lambda bad: {**build(bad), tag: value}


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    where: str  # body, query or path
    site: Site
    bad: str
    minimal_body: Any  # what the other cases of this operation send (the body's required members)

    @property
    def id(self) -> str:
        kind = "nul" if self.bad == NUL else "surrogate"
        branches = f" ({'/'.join(map(str, self.site.branches))})" if self.site.branches else ""
        return f"{self.method.upper()} {self.path} {self.where}.{'.'.join(map(str, self.site.loc))}{branches} {kind}"


def _cases(document: dict[str, Any]) -> list[Case]:
    walker = Walker(document)
    cases = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            minimal = None if body is None else walker.minimal(body["schema"])
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "header":
                    continue  # HTTP cannot carry NUL in a header (h11 refuses it on both sides)
                for site in walker.sites(parameter["schema"], (parameter["name"],)):
                    # Percent-decoding turns invalid UTF-8 into U+FFFD: only NUL can reach a parameter.
                    cases.append(Case(method, path, parameter["in"], site, NUL, minimal))
            if body is not None:
                for site in walker.sites(body["schema"]):
                    cases.extend(Case(method, path, "body", site, bad, minimal) for bad in (NUL, SURROGATE))
    return cases


def _document() -> dict[str, Any]:
    from agent_runtime.api.app import create_app
    from agent_runtime.settings import Settings

    app: FastAPI = create_app(Settings(_env_file=None))  # type: ignore[call-arg]
    return app.openapi()


CASES = _cases(_document())


def test_the_walk_finds_the_known_text_fields() -> None:
    # Guards the walker itself: a sample of fields it must reach (the test above covers all it finds).
    found = {c.id for c in CASES}
    for expected in (
        "PUT /v1/profile body.username surrogate",
        "PUT /v1/profile body.settings.privacy.note.0.inner (2) nul",
        "PUT /v1/profile body.settings.preferences.timezone (1) surrogate",
        "POST /v1/sessions body.title nul",
        "PATCH /v1/sessions/{session_id} body.title surrogate",
        "GET /v1/sessions query.q nul",
        "GET /v1/usage query.start nul",
        "POST /v1/sessions/{session_id}/runs body.message surrogate",
        "POST /v1/sessions/{session_id}/runs body.message_id nul",
        "POST /v1/sessions/{session_id}/runs body.context.0.value surrogate",
        "DELETE /v1/sessions/{session_id} path.session_id nul",
        "POST /v1/agui body.threadId surrogate",
        "POST /v1/agui body.messages.0.content (assistant) nul",
        "POST /v1/agui body.messages.0.content (user) surrogate",
        "POST /v1/agui body.messages.0.toolCallId (tool) nul",
    ):
        assert expected in found, sorted(found)
    assert len(CASES) > 40


async def _snapshot(client: httpx.AsyncClient, user: User) -> dict[str, Any]:
    sessions = (await client.get("/v1/sessions", headers=user.headers)).json()
    messages = {
        s["id"]: (await client.get(f"/v1/sessions/{s['id']}/messages", headers=user.headers)).json()
        for s in sessions["items"]
    }
    profile = (await client.get("/v1/profile", headers=user.headers)).json()
    return {"profile": profile, "sessions": sessions, "messages": messages}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_unstorable_text_is_a_422_naming_the_field_and_stores_nothing(
    client: httpx.AsyncClient, make_user: Callable[[], User], case: Case
) -> None:
    user = make_user()
    path = case.path
    if case.where == "path":
        path = path.replace(f"{{{case.site.loc[0]}}}", quote(case.bad))
    if "{session_id}" in path:
        created = await client.post("/v1/sessions", headers=user.headers, json={"title": "before"})
        path = path.replace("{session_id}", created.json()["id"])
    path = re.sub(r"\{[a-z_]+\}", lambda _: str(uuid4()), path)  # other ids: well formed, unknown
    before = await _snapshot(client, user)

    params = {str(case.site.loc[0]): case.bad} if case.where == "query" else None
    body = case.site.build(case.bad) if case.where == "body" else case.minimal_body
    content = None if body is None else json.dumps(body).encode()
    headers = {**user.headers, "content-type": "application/json"}
    response = await client.request(case.method, path, params=params, content=content, headers=headers)

    assert response.status_code == 422, response.text
    (detail,) = response.json()["error"]["details"]
    assert detail["loc"] == [case.where, *case.site.loc]
    if not case.site.formatted:
        assert detail["type"] == ERROR_TYPE
    assert await _snapshot(client, user) == before
