"""Provider errors and the run timeout: RUN_ERROR last, session failed with the event's error_id, user message kept."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from decimal import Decimal

import httpx
import pytest
from tests.conftest import User
from tests.runs.conftest import (
    RUN_END,
    RUN_START,
    STAGE_START,
    Harness,
    MakeHarness,
    RunResult,
    intent_direct,
    intent_needs,
    run_cost,
    run_error_id,
    types,
    usage,
    warm_up,
)
from tests.stubs.deepseek_stub import StubFault, StubReply, StubToolCall

from agent_runtime.logging_setup import JsonFormatter


def _assert_failure_logged(
    caplog: pytest.LogCaptureFixture, sid: str, run_id: str, error_id: str, code: str, message: str
) -> None:
    """Ops find a failure in the logs by the error_id the client was shown: one ERROR record for the run,
    whose JSON log line (the production formatter) carries the same ids."""
    records = [r for r in caplog.records if r.getMessage() == "run failed" and getattr(r, "run_id", None) == run_id]
    assert [(r.name, r.levelname, getattr(r, "error_id", None)) for r in records] == [
        ("agent_runtime.engine.runs.execution", "ERROR", error_id)
    ]
    line = json.loads(JsonFormatter().format(records[0]))
    assert {k: line.get(k) for k in ("msg", "error_id", "run_id", "session_id", "code", "reason")} == {
        "msg": "run failed",
        "error_id": error_id,
        "run_id": run_id,
        "session_id": sid,
        "code": code,
        "reason": message,
    }


async def _assert_failed(
    h: Harness,
    user: User,
    sid: str,
    result: RunResult,
    code: str,
    message: str,
    caplog: pytest.LogCaptureFixture,
    *,
    cut: bool = False,
) -> None:
    """`cut`: the run stopped a call the provider was answering, which is billed with an estimated usage."""
    assert result.status == 200
    assert types(result.events) == [*RUN_START, *STAGE_START, "STATE_DELTA", "STEP_FINISHED", "RUN_ERROR"]
    assert result.events[0] == {
        "type": "RUN_STARTED",
        "threadId": sid,
        "runId": result.run_id,
        "protocolVersion": "1.0",
    }
    assert result.events[3:7] == [
        {"type": "STEP_STARTED", "stepName": "intent"},
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/agentRuntime/stage", "value": "intent"}]},
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/agentRuntime/status", "value": "failed"}]},
        {"type": "STEP_FINISHED", "stepName": "intent"},
    ]
    error = result.events[-1]
    error_id = run_error_id(error, code, message)
    session = await h.session(user, sid)
    assert (session["status"], session["error_id"]) == ("failed", error_id)
    assert session["state_snapshot"] == {"status": "failed", "run_id": result.run_id, "error_id": error_id}
    # The user's message is kept; no model answered, so there is nothing else to store, and nothing to bill but
    # the call the run cut (an estimate: the provider processed the prompt).
    rows = await h.rows(user, sid)
    assert [(r.seq, r.role, r.content) for r in rows] == [(1, "user", "hello"), *([(-1, "assistant", "")] * cut)]
    if cut:
        estimate = rows[1].metadata.model_dump()
        assert (estimate["estimated"], estimate["error"], rows[1].output_tokens) == (True, "interrupted: cancelled", 0)
        assert rows[1].input_tokens > 0 and rows[1].cost > 0
    _assert_failure_logged(caplog, sid, result.run_id, error_id, code, message)


UNAVAILABLE = "No language model could answer: the model and its fallbacks are all unavailable."


@pytest.mark.parametrize("status", [500, 503])
async def test_server_errors_beyond_the_retries_and_the_fallback_fail_the_run(
    h: Harness, make_user: Callable[[], User], caplog: pytest.LogCaptureFixture, status: int
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    # llm_max_retries = 2: the first try and two retries on deepseek-flash, then the same on its fallback
    # (config/models.yaml: deepseek-v4-pro), then the error.
    h.stub.enqueue(*[StubFault(kind="status", status=status)] * 6, intent_direct("never used"))

    result = await h.run(user, sid, "hello")

    assert [r.body["model"] for r in h.stub.requests] == ["deepseek-flash"] * 3 + ["deepseek-v4-pro"] * 3
    await _assert_failed(h, user, sid, result, "llm_unavailable", UNAVAILABLE, caplog)


async def test_bad_request_fails_the_run_without_retrying(
    make_harness: MakeHarness, make_user: Callable[[], User], caplog: pytest.LogCaptureFixture
) -> None:
    # The stub answers an unknown model with DeepSeek's 400 "Model Not Exist" (invalid_request_error).
    # (A queued StubFault(status=400) is labelled "rate_limit" by the stub and LiteLLM makes it a 429.)
    async with make_harness(llm_model="deepseek/deepseek-v9", unpriced_model_price_cny=Decimal(1)) as h:
        user = make_user()
        sid = await h.new_session(user)

        result = await h.run(user, sid, "hello")

        assert len(h.stub.requests) == 1
        assert h.stub.requests[0].body["model"] == "deepseek-v9"
        await _assert_failed(
            h, user, sid, result, "llm_bad_request", "The language model provider rejected the request.", caplog
        )


async def test_a_retried_server_error_is_invisible(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(StubFault(kind="status", status=500), intent_direct("Hi!", usage=usage(100, 10)))

    result = await h.run(user, sid, "hello")

    assert len(h.stub.requests) == 2
    assert types(result.events)[-3:] == RUN_END
    assert run_cost(result.events)["modelCalls"] == 1
    assert run_cost(result.events)["cost"] == "0.0002800000"  # at peak: 100 * 2 + 10 * 8 per million
    assert (await h.session(user, sid))["status"] == "completed"


async def test_run_timeout_fails_the_run_and_frees_the_session(
    h: Harness, make_harness: MakeHarness, make_user: Callable[[], User], caplog: pytest.LogCaptureFixture
) -> None:
    # A first run on the default app loads CrewAI and LiteLLM: the timed run below measures only itself.
    await warm_up(h, make_user())
    async with make_harness(run_timeout_seconds=1.0) as timed:
        user = make_user()
        sid = await timed.new_session(user)
        # The model is held until the test lets it answer; the per-call LLM timeout (5 s) would fire later.
        hold = timed.stub.hold_replies()
        timed.stub.enqueue(intent_direct("too late"))

        started = time.monotonic()
        result = await timed.run(user, sid, "hello")
        elapsed = time.monotonic() - started

        assert 1.0 <= elapsed < 3.0  # not waiting for the model's answer
        await _assert_failed(
            timed, user, sid, result, "run_timeout", "the run took longer than RUN_TIMEOUT_SECONDS", caplog, cut=True
        )
        # The late answer may come now: it changes nothing. The session takes the next run.
        await hold.release()
        assert (await timed.session(user, sid))["status"] == "failed"
        timed.stub.enqueue(intent_direct("On time now."))
        second = await timed.run(user, sid, "again")
        assert types(second.events)[-1] == "RUN_FINISHED"
        session = await timed.session(user, sid)
        assert (session["status"], session["error_id"]) == ("completed", None)
        assert [r.content for r in await timed.rows(user, sid) if "too late" in r.content] == []


async def test_failure_after_a_tool_call_keeps_and_bills_what_the_run_did(
    h: Harness, make_user: Callable[[], User], caplog: pytest.LogCaptureFixture
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    arguments = '{"expression": "2 * 21"}'
    h.stub.enqueue(
        intent_needs("Compute 2 * 21.", usage=usage(800, 40, 600)),
        StubReply(tool_calls=[StubToolCall(id="call_1", name="calculator", arguments=arguments)], usage=usage(900, 20)),
        *[StubFault(kind="status", status=500)] * 6,
    )

    result = await h.run(user, sid, "what is 2 * 21?")

    assert len(h.stub.requests) == 8  # intent, execution, its retries, then the fallback's
    assert types(result.events) == [
        *RUN_START,
        *STAGE_START,
        "STEP_FINISHED",
        *STAGE_START,
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STATE_DELTA",
        "STEP_FINISHED",
        "RUN_ERROR",
    ]
    assert result.events[-2] == {"type": "STEP_FINISHED", "stepName": "execution"}
    error = result.events[-1]
    error_id = run_error_id(error, "llm_unavailable", UNAVAILABLE)
    _assert_failure_logged(caplog, sid, result.run_id, error_id, "llm_unavailable", UNAVAILABLE)
    rows = await h.rows(user, sid)
    reason = f"llm_unavailable: {UNAVAILABLE}"
    assert [(r.seq, r.role, r.metadata.kind, r.input_tokens, r.output_tokens, str(r.cost)) for r in rows] == [
        (1, "user", "user_input", 0, 0, "0E-10"),
        (2, "assistant", "tool_call", 900, 20, "0.0019600000"),
        (3, "tool", "tool_result", 0, 0, "0E-10"),
        (-1, "assistant", "audit", 800, 40, "0.0007440000"),
    ]
    assert rows[2].content == '{"expression":"2 * 21","result":"42"}'
    assert rows[3].metadata.model_dump()["error"] == reason
    total = (await h.client.get(f"/v1/sessions/{sid}/usage", headers=user.headers)).json()["total"]
    assert (total["cost"], total["model_calls"]) == ("0.0027040000", 2)
    session = await h.session(user, sid)
    assert (session["status"], session["error_id"]) == ("failed", error_id)


async def test_a_nul_character_in_the_message_is_refused_before_the_run(
    h: Harness, make_user: Callable[[], User]
) -> None:
    # Valid JSON ("\u0000") that PostgreSQL text cannot store: it must be a 422 naming the field, like any
    # other unstorable input, not a 500 from the insert after the session was already marked running.
    user = make_user()
    sid = await h.new_session(user)
    transport = httpx.ASGITransport(app=h.app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "hi\x00"})

    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], [d["loc"] for d in error["details"]]) == ("validation_error", [["body", "message"]])
    session = await h.session(user, sid)
    assert (session["status"], session["error_id"]) == ("pending", None)
    assert await h.rows(user, sid) == []
    assert h.stub.requests == []
