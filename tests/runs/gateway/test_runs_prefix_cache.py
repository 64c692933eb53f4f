"""Against the DeepSeek stub that bills prefix-cache hits from bytes (tests/stubs/prefix_cache.py), a conversation
of many turns: between two cuts every turn's first request starts with the previous turn's request up to its
task, byte for byte, and the stub bills that prefix as cache hits; the prefix changes only on the (few) turns
that cut the window, each of which makes exactly one summary call."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from tests.conftest import User
from tests.runs.conftest import MakeHarness, intent_direct, stage_request_text, types
from tests.stubs.deepseek_stub import RecordedRequest, StubReply
from tests.stubs.prefix_cache import UNIT_BYTES, UNIT_TOKENS, PrefixCacheStub, serialise

TURNS = 14


def responder(request: RecordedRequest) -> StubReply:
    task = str(request.messages[-1].get("content"))
    if "ConversationSummary" in task:
        said = [str(m["content"])[:30] for m in request.messages[1:-1] if m.get("role") == "user"]
        return StubReply(content=json.dumps({"summary": "The user said: " + "; ".join(said)}))
    asked = stage_request_text(request)
    return intent_direct(f"Here is a fairly detailed answer to {asked!r}, long enough to be realistic. " * 3)


async def test_turns_between_cuts_send_byte_identical_prefixes(
    make_harness: MakeHarness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch
) -> None:
    # make_harness builds its stub from its module's DeepSeekStub; this test's harness gets the caching one.
    monkeypatch.setitem(make_harness.__wrapped__.__globals__, "DeepSeekStub", PrefixCacheStub)  # type: ignore[attr-defined]
    async with make_harness(
        memory_max_messages=12, memory_low_messages=6, memory_summary=True, run_timeout_seconds=120
    ) as h:
        stub = h.stub
        assert isinstance(stub, PrefixCacheStub)
        stub.responder = responder
        user = make_user()
        sid = await h.new_session(user)
        firsts: list[int] = []
        cut_turns: list[int] = []
        for turn in range(TURNS):
            before = len(stub.requests)
            result = await h.run(user, sid, f"question number {turn}: tell me more about topic {turn}")
            assert types(result.events)[-1] == "RUN_FINISHED", result.events[-1]
            calls = stub.requests[before:]
            summaries = [c for c in calls if "ConversationSummary" in str(c.messages[-1].get("content"))]
            assert len(calls) - len(summaries) == 1, "one intent call per turn (direct answers)"
            if summaries:
                cut_turns.append(turn)
            firsts.append(before + len(summaries))

        extended: list[int] = []
        for turn in range(1, TURNS):
            previous, current = stub.requests[firsts[turn - 1]], stub.requests[firsts[turn]]
            shared = previous.messages[:-1]  # all but the stage's task
            if current.messages[: len(shared)] == shared:
                extended.append(turn)
                prefix = serialise({"messages": shared})
                assert serialise({"messages": current.messages})[: len(prefix)] == prefix, "byte-identical prefix"
                hit = stub.accounts[firsts[turn]].hit_tokens
                assert hit >= len(prefix) // UNIT_BYTES * UNIT_TOKENS, "billed as cache hits"
        # 12 messages at most (11 with the summary), cut back to 6 (5): turns add two messages each, so a cut
        # every few turns; every other turn extends the previous prefix.
        assert cut_turns and len(cut_turns) <= 4, cut_turns
        assert [t for t in range(1, TURNS) if t not in extended] == cut_turns
