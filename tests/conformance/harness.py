"""The harness of the conformance tests: the official `@ag-ui/client` (npm), real `serve` processes, and the
checks every stream must pass (see test_agui_client.py for what is checked and why).

The client is installed from tests/conformance/package-lock.json with `npm ci` into
tests/conformance/node_modules (git-ignored), once: later runs reuse it while the lock file is unchanged
(npm's cache: $AGENT_RUNTIME_NPM_CACHE, default ~/.cache/agent-runtime/npm). No Node/npm or no registry
is a failure, not a skip: CI has both.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from ag_ui_validate.pytest_plugin import validate_agui
from tests.support.npm import npm_ci
from tests.support.serve import ServeProcess

from agent_runtime.engine.auth import mint_token
from agent_runtime.settings import Settings

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node_modules"
CLIENT_SCRIPT = HERE / "agui_client.mjs"
LEGACY_SCHEMAS_SCRIPT = HERE / "agui_legacy_schemas.mjs"
# A server imports CrewAI in the background after start-up (~10 s of CPU) and its first run waits for it.
CLIENT_TIMEOUT = 120

# Env vars that would point the server at a real model (or away from the offline demo model).

TERMINAL = {"RUN_FINISHED", "RUN_ERROR"}
# RUN_ERROR's message ends with the error_id the session stores (RunService._fail).
ERROR_ID = re.compile(r"\(error_id ([0-9a-f]{32})\)$")


# --------------------------------------------------------------------------------------------------
# Installing the client


def _pinned_client_version() -> str:
    return str(json.loads((HERE / "package.json").read_text())["dependencies"]["@ag-ui/client"])


def _installed_client_version() -> str | None:
    manifest = NODE_MODULES / "@ag-ui" / "client" / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def ensure_client_installed() -> str:
    """`npm ci` the pinned client unless node_modules already matches the lock file; returns its version."""
    npm_ci(HERE, needed_for="the AG-UI conformance test (@ag-ui/client)")
    version = _installed_client_version()
    if version != _pinned_client_version():
        pytest.fail(f"npm ci installed @ag-ui/client {version!r}, expected {_pinned_client_version()!r}")
    return _pinned_client_version()


# --------------------------------------------------------------------------------------------------
# The server


@dataclass
class Servers:
    demo: ServeProcess  # offline demo model: deterministic, "hello" -> direct, "what is 12*7?" -> calculator
    failing: ServeProcess  # DeepSeek pointed at a closed port, no retries: every run ends in RUN_ERROR


# --------------------------------------------------------------------------------------------------
# Running the client


@dataclass
class Case:
    user_id: UUID
    headers: dict[str, str]
    thread_id: str
    user_message_id: str


async def new_case(server: ServeProcess, settings: Settings) -> Case:
    """A new user with a new thread: threads are sessions made with `POST /v1/sessions` (AG-UI answers any
    other thread id with 404, so that ids cannot be probed)."""
    user_id = uuid4()
    headers = {"Authorization": f"Bearer {mint_token(settings, user_id)}"}
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=10) as client:
        response = await client.post("/v1/sessions", json={})
    assert response.status_code == 201, response.text
    return Case(user_id=user_id, headers=headers, thread_id=response.json()["id"], user_message_id=f"user-{uuid4()}")


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=1))


async def run_client(
    server: ServeProcess, case: Case, text: str, *, steps: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    """One run of the official client on `text`, or one per step (`agui_client.mjs` says what a step may do):
    the first run's summary, with every run's under `runs`."""
    request: dict[str, Any] = {
        "url": f"{server.base_url}/v1/agui",
        "headers": case.headers,
        "threadId": case.thread_id,
        "messages": [{"id": case.user_message_id, "role": "user", "content": text}],
        "timeoutMs": CLIENT_TIMEOUT * 1000,
        **extra,
    }
    if steps is not None:
        request["steps"] = steps
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(CLIENT_SCRIPT),
        cwd=HERE,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(request).encode()), CLIENT_TIMEOUT + 15)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"agui_client.mjs hung\nserver log:\n{server.log_tail()}") from None
    stderr = err.decode(errors="replace")
    assert proc.returncode == 0, f"agui_client.mjs failed ({proc.returncode}):\n{stderr[-4000:]}"
    summary: dict[str, Any] = json.loads(out)
    summary["_stderr"] = stderr
    # Kept beside the server logs for a post-mortem (the path is in every failure message).
    summary["_dump"] = str(server.workdir / f"client-{case.thread_id}.json")
    _write_json(Path(summary["_dump"]), summary)
    summary["_server_log"] = server.log_tail()
    for run in summary["runs"]:
        run.update(_stderr=stderr, _dump=summary["_dump"], _server_log=summary["_server_log"])
    return summary


def _explain(summary: dict[str, Any]) -> str:
    return (
        f"\nclient error: {json.dumps(summary['clientError'], indent=1)}"
        f"\nclient events: {summary['eventTypes']}\nwire events: {summary['raw']['eventTypes']}"
        f"\nwarnings: {json.dumps(summary['warnings'], indent=1)}\nhttp: {summary['http']['status']}"
        f" {summary['http']['contentType']}\nnode stderr:\n{summary['_stderr'][-3000:]}"
        f"\nserver log:\n{summary['_server_log'][-3000:]}\nfull client summary: {summary['_dump']}"
    )


def assert_accepted(summary: dict[str, Any], *, terminal: str) -> list[dict[str, Any]]:
    """The client took the whole stream without complaint; returns the wire events."""
    why = _explain(summary)
    assert summary["clientVersion"] == _pinned_client_version(), why
    assert summary["http"]["status"] == 200, why
    assert (summary["http"]["contentType"] or "").startswith("text/event-stream"), why
    assert not summary["timedOut"], f"the run did not end within {CLIENT_TIMEOUT} s" + why
    # Its verifier/schema check throws on a protocol violation and runAgent() rejects: the stream was refused.
    assert summary["clientError"] is None, "the official client rejected the stream" + why
    assert summary["runFailed"] == [], why
    # Nothing stripped, dropped or ignored by the client ("[ag-ui][enforce] ...", unknown ids, ...).
    assert summary["warnings"] == [], "the client warned about our stream" + why

    raw = summary["raw"]
    assert raw["complete"] and raw["readError"] is None, why
    assert raw["parseErrors"] == [] and raw["nonDataFrames"] == [] and raw["trailing"] is None, why
    events: list[dict[str, Any]] = raw["events"]
    types = [e["type"] for e in events]
    # Every event on the wire reached the client's subscribers, in order.
    assert summary["eventTypes"] == types, why

    assert types and types[0] == "RUN_STARTED", why
    assert types[-1] == terminal, f"the stream must end with {terminal}" + why
    assert sum(t in TERMINAL for t in types) == 1, f"exactly one terminal event, and last{why}"
    assert events[0]["threadId"] == summary["http"]["requestBody"]["threadId"], why
    if terminal == "RUN_FINISHED":
        assert events[-1]["threadId"] == events[0]["threadId"] and events[-1]["runId"] == events[0]["runId"], why
        assert summary["runErrors"] == [] and len(summary["runFinished"]) == 1, why
    else:
        assert len(summary["runErrors"]) == 1 and summary["runFinished"] == [], why

    findings = validator_findings(events)
    assert findings == [], f"ag-ui-validate found: {json.dumps(findings, indent=1)}{why}"

    # A run that resumes a turn answers tool calls of an earlier run, which its MESSAGES_SNAPSHOT carries.
    started: set[str] = set()
    for event in events:
        if event["type"] == "TOOL_CALL_START":
            started.add(event["toolCallId"])
        elif event["type"] == "MESSAGES_SNAPSHOT":
            started |= {c["id"] for m in event["messages"] for c in m.get("toolCalls") or []}
        elif event["type"] == "TOOL_CALL_RESULT":
            assert event["toolCallId"] in started, f"TOOL_CALL_RESULT for a tool call never started: {event}{why}"
    return events


# --------------------------------------------------------------------------------------------------
# The other checkers: ag-ui-validate (PyPI) and @ag-ui/core 0.0.59's schemas


# ag-ui-validate rules that do not apply to this server's streams (info level), each with its reason here and in
# docs/testing.md ("ag-ui-validate"); any other finding, of any severity, fails the test.
VALIDATOR_WAIVED: dict[str, str] = {
    "AGUI208": "parentMessageId names the stored assistant row that carries only tool calls (no text event), so "
    "the client's message gets the stored id; without it the client would use the toolCallId",
    "AGUI902": "timestamp is optional; order is the SSE id (<run_id>:<seq>) and the stored log",
    "AGUI903": "run_cost and input_ignored are documented API names clients match on; a prefix would break them",
}


def validator_findings(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ag-ui-validate's findings (any severity) over one recorded stream, less the waived rules."""
    report = validate_agui(events)
    assert report.internal_errors == [], report.internal_errors
    return [
        {"rule": d.rule, "severity": d.severity, "event": d.event_index, "type": d.event_type, "message": d.message}
        for d in report.diagnostics
        if d.rule not in VALIDATOR_WAIVED
    ]


async def legacy_schema_rejections(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events @ag-ui/core 0.0.59's EventSchemas reject (what CopilotKit 1.74's client would fail on)."""
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(LEGACY_SCHEMAS_SCRIPT),
        cwd=HERE,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(json.dumps(events).encode()), 60)
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    report: dict[str, Any] = json.loads(out)
    assert report["version"] == "0.0.59", report
    rejected: list[dict[str, Any]] = report["rejected"]
    return rejected


# --------------------------------------------------------------------------------------------------
# Comparing the client's messages with ours


def _client_view(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    return {
        "id": message["id"],
        "role": message["role"],
        "content": "" if content is None else content,
        "toolCalls": [
            (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message.get("toolCalls") or []
        ],
        "toolCallId": message.get("toolCallId"),
    }


def _stored_view(message: dict[str, Any]) -> dict[str, Any]:
    metadata = message["metadata"]
    return {
        "id": message["message_id"],
        "role": message["role"],
        "content": message["content"],
        "toolCalls": [(c["id"], c["name"], c["arguments"]) for c in metadata.get("tool_calls") or []],
        "toolCallId": metadata.get("tool_call_id"),
    }


async def stored_session(server: ServeProcess, case: Case) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.base_url, headers=case.headers, timeout=10) as client:
        response = await client.get(f"/v1/sessions/{case.thread_id}")
    assert response.status_code == 200, response.text
    session: dict[str, Any] = response.json()
    return session


async def stored_messages(server: ServeProcess, case: Case) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.base_url, headers=case.headers, timeout=10) as client:
        response = await client.get(f"/v1/sessions/{case.thread_id}/messages", params={"limit": 100})
    assert response.status_code == 200, response.text
    page = response.json()
    assert page.get("total", len(page["items"])) == len(page["items"]), page
    return list(page["items"])


async def assert_messages_match(server: ServeProcess, case: Case, summary: dict[str, Any]) -> list[dict[str, Any]]:
    ours = [_stored_view(m) for m in await stored_messages(server, case)]
    # Reasoning is streamed (and kept by the client) but stored only as an audit row: not a thread message.
    theirs = [_client_view(m) for m in summary["messages"] if m["role"] != "reasoning"]
    assert theirs == ours, (
        "the messages the client rebuilt differ from the stored ones\n"
        f"client: {json.dumps(theirs, indent=1)}\nstored: {json.dumps(ours, indent=1)}"
    )
    return ours


_REPLAY_SCRIPT = Path(__file__).resolve().parent / "agui_replay.mjs"


async def official_client_accepts(events: list[dict[str, Any]], thread_id: str, run_id: str) -> dict[str, Any]:
    ensure_client_installed()
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(_REPLAY_SCRIPT),
        cwd=_REPLAY_SCRIPT.parent,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    payload = json.dumps({"threadId": thread_id, "runId": run_id, "events": events}).encode()
    out, err = await asyncio.wait_for(proc.communicate(payload), 60)
    assert proc.returncode == 0, err.decode()[-3000:]
    summary: dict[str, Any] = json.loads(out)
    assert summary["clientError"] is None and summary["warnings"] == [], summary
    assert summary["eventTypes"] == [e["type"] for e in events], summary
    return summary
