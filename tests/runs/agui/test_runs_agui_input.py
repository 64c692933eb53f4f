"""What `/v1/agui` takes from a client, and what it refuses before anything is stored.

Every text anywhere in a RunAgentInput (ids, contents, tool calls, context, tools, state, forwarded props,
resume entries, even object keys) is checked: NUL or a lone surrogate is a 422 naming the field. The cases
are generated from one complete input by walking all its strings, not listed by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.conftest import User
from tests.runs.conftest import Harness

from agent_runtime.engine.runs.agui.input import MAX_CLIENT_STATE_BYTES
from agent_runtime.engine.runs.request.frontend_tools import MAX_FRONTEND_TOOLS
from agent_runtime.engine.runs.request.models import MAX_NEW_MESSAGES, MAX_RESUME_ENTRIES

# Discriminators and enums: a changed value fails their literal check (also a 422, but not ours to name).
_LITERAL_KEYS = {"role", "type", "status", "op"}
# Objects whose keys are the client's own (renaming a protocol field would be a missing-field 422 instead).
_FREE_FORM = {"state", "forwardedProps", "parameters", "payload"}


def full_input(thread_id: str) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": "run-1",
        "parentRunId": "parent-run",
        "state": {"draft": "text", "nested": {"list": ["a"]}},
        "messages": [
            {"id": "s-1", "role": "system", "content": "system text"},
            {"id": "d-1", "role": "developer", "content": "developer text"},
            {
                "id": "a-1",
                "role": "assistant",
                "content": "assistant text",
                "toolCalls": [{"id": "tc-1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"id": "t-1", "role": "tool", "content": "tool text", "toolCallId": "tc-1"},
            {"id": "u-1", "role": "user", "content": "hello"},
        ],
        "tools": [
            {
                "name": "show_card",
                "description": "Shows a card",
                "parameters": {"type": "object", "properties": {"title": {"type": "string", "description": "t"}}},
            }
        ],
        "context": [{"description": "page", "value": "settings"}],
        "forwardedProps": {"prop": "value"},
        "resume": [{"interruptId": "approve-x", "status": "resolved", "payload": {"arguments": {"bio": "b"}}}],
    }


def string_leaves(value: Any, path: list[str | int]) -> Iterator[list[str | int | None]]:
    """Paths of every string value, and of every key of a free-form object as `[..., "<key>", None]`."""
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            if _FREE_FORM.intersection(p for p in path if isinstance(p, str)):
                yield [*path, key, None]
            if key not in _LITERAL_KEYS:
                yield from string_leaves(item, [*path, key])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from string_leaves(item, [*path, index])


def with_bad_text(payload: dict[str, Any], path: list[Any], bad: str) -> tuple[Any, list[Any]]:
    """A copy of `payload` with `bad` put into the string (or the object key) at `path`; the loc to expect."""
    copy = json.loads(json.dumps(payload))
    if path[-1] is None:
        *parent_path, key, _ = path
        parent = copy
        for part in parent_path:
            parent = parent[part]
        parent[f"{key}{bad}"] = parent.pop(key)
        return copy, ["body", *parent_path, f"{key}\ufffd"]  # named, but not echoed raw
    *parent_path, last = path
    parent = copy
    for part in parent_path:
        parent = parent[part]
    parent[last] = parent[last] + bad
    return copy, ["body", *path]


@pytest.mark.parametrize(("bad", "msg"), [("\x00", "NUL (U+0000)"), ("\ud800", "lone surrogate")])
async def test_unstorable_text_anywhere_in_the_input_is_a_422_naming_it(
    h: Harness, make_user: Callable[[], User], bad: str, msg: str
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    payload = full_input(sid)
    paths = list(string_leaves(payload, []))
    assert len(paths) > 30  # the walk reached every part of the input

    for path in paths:
        body, loc = with_bad_text(payload, path, bad)
        # ASCII JSON (`\ud800` escapes): a lone surrogate cannot be encoded as UTF-8 by the client either.
        headers = {**user.headers, "content-type": "application/json"}
        response = await h.client.post("/v1/agui", headers=headers, content=json.dumps(body).encode())
        assert response.status_code == 422, (path, response.text)
        error = response.json()["error"]
        assert error["details"][0]["loc"] == loc, (path, error)
        assert msg in error["details"][0]["msg"], (path, error)

    session = await h.session(user, sid)
    assert (session["status"], session["error_id"]) == ("pending", None)
    assert await h.rows(user, sid) == []
    assert h.stub.requests == []


async def test_duplicate_message_ids_are_a_422_and_leave_nothing_behind(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    body = {
        "threadId": sid,
        "runId": "r",
        "messages": [{"id": "m", "role": "user", "content": "a"}, {"id": "m", "role": "user", "content": "b"}],
    }

    response = await h.client.post("/v1/agui", headers=user.headers, json=body)

    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"] == [
        {"loc": ["body", "messages", 1, "id"], "msg": "'m' is repeated", "type": None}
    ]
    session = await h.session(user, sid)
    assert (session["status"], session["error_id"]) == ("pending", None)
    assert await h.rows(user, sid) == []


async def test_more_new_user_messages_than_the_limit_are_a_422_and_leave_nothing_behind(
    h: Harness, make_user: Callable[[], User]
) -> None:
    # Three times the limit (it was 10,001 rows from one request before there was one).
    user = make_user()
    sid = await h.new_session(user)
    messages = [{"id": f"m-{i}", "role": "user", "content": f"turn {i}"} for i in range(3 * MAX_NEW_MESSAGES)]

    response = await h.client.post(
        "/v1/agui", headers=user.headers, json={"threadId": sid, "runId": "r", "messages": messages}
    )

    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"] == [
        {"loc": ["body", "messages"], "msg": f"at most {MAX_NEW_MESSAGES} new user messages", "type": None}
    ]
    session = await h.session(user, sid)
    assert (session["status"], session["error_id"]) == ("pending", None)
    assert await h.rows(user, sid) == []
    assert h.stub.requests == []


@pytest.mark.parametrize(
    ("extra", "loc", "msg"),
    [
        (
            {"resume": [{"interruptId": f"i-{n}", "status": "cancelled"} for n in range(3 * MAX_RESUME_ENTRIES)]},
            ["body", "resume"],
            f"at most {MAX_RESUME_ENTRIES}",
        ),
        (
            {"state": {"draft": "x" * (3 * MAX_CLIENT_STATE_BYTES)}},
            ["body", "state"],
            f"must be at most {MAX_CLIENT_STATE_BYTES} bytes of JSON",
        ),
        (
            {"tools": [{"name": f"t{n}", "description": "d", "parameters": {}} for n in range(3 * MAX_FRONTEND_TOOLS)]},
            ["body", "tools"],
            f"at most {MAX_FRONTEND_TOOLS} tools per run",
        ),
    ],
    ids=["resume", "state", "tools"],
)
async def test_each_bounded_part_of_the_input_at_three_times_its_limit_is_a_422_and_leaves_nothing_behind(
    h: Harness, make_user: Callable[[], User], extra: dict[str, Any], loc: list[str], msg: str
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    body = {"threadId": sid, "runId": "r", "messages": [{"id": "u", "role": "user", "content": "hi"}], **extra}

    response = await h.client.post("/v1/agui", headers=user.headers, json=body)

    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"] == [{"loc": loc, "msg": msg, "type": None}]
    session = await h.session(user, sid)
    assert (session["status"], session["error_id"]) == ("pending", None)
    assert await h.rows(user, sid) == []
    assert h.stub.requests == []
