"""Against the DeepSeek stub that bills prefix-cache hits from bytes (tests/stubs/prefix_cache.py), a conversation
of many turns: between two cuts every turn's first request starts with the previous turn's request up to its
task, byte for byte, and the stub bills that prefix as cache hits; the prefix changes only on the (few) turns
that cut the window, each of which makes exactly one summary call."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

import pytest
from tests.conftest import User
from tests.runs.conftest import MakeHarness, intent_direct, stage_request_text, types
from tests.stubs.deepseek_stub import RecordedRequest, StubReply
from tests.stubs.prefix_cache import BLOCK_TOKENS, UNIT_BYTES, UNIT_TOKENS, PrefixCacheStub, serialise

TURNS = 14
CUT_TURNS = 30
# About 420 characters, as the turns of issue 31's report and of scripts/bench/conversation_recall.py.
QUESTION = (
    "I am curious about a new hobby this week. Could you explain the first steps, the most common mistakes that "
    "beginners make, what it usually costs to start, and how long it takes to see real progress? And give me two "
    "practical tips for staying motivated over the first months, and tell me which books or videos are worth it."
)


def summarising_responder(answer: Callable[[str], str]) -> Callable[[RecordedRequest], StubReply]:
    """Summary calls get the user turns' openings as the summary; stage calls a direct answer, `answer(asked)`."""

    def respond(request: RecordedRequest) -> StubReply:
        task = str(request.messages[-1].get("content"))
        if "ConversationSummary" in task:
            said = [str(m["content"])[:30] for m in request.messages[1:-1] if m.get("role") == "user"]
            return StubReply(content=json.dumps({"summary": "The user said: " + "; ".join(said)}))
        return intent_direct(answer(stage_request_text(request)))

    return respond


responder = summarising_responder(
    lambda asked: f"Here is a fairly detailed answer to {asked!r}, long enough to be realistic. " * 3
)
# About 420 characters, as the questions below.
long_responder = summarising_responder(
    lambda asked: f"Here is a careful answer to {asked[:40]!r}, with the steps and the reasons for each. " * 4
)


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


async def cut_turn_hits(make_harness: MakeHarness, user: User, head_tokens: int) -> list[float]:
    """The share of each cut turn's first request that the stub billed as cache hits."""
    async with make_harness(
        memory_max_tokens=4000,
        memory_low_tokens=1000,
        memory_head_tokens=head_tokens,
        memory_summary=True,
        max_runs_per_user_per_minute=0,
        run_timeout_seconds=120,
    ) as h:
        stub = h.stub
        assert isinstance(stub, PrefixCacheStub)
        stub.responder = long_responder
        sid = await h.new_session(user)
        hits: list[float] = []
        for turn in range(CUT_TURNS):
            before = len(stub.requests)
            result = await h.run(user, sid, f"Question {turn}: " + QUESTION)
            assert result.events and types(result.events)[-1] == "RUN_FINISHED", (turn, result)
            summaries = [
                c for c in stub.requests[before:] if "ConversationSummary" in str(c.messages[-1].get("content"))
            ]
            if summaries:
                billed = stub.requests[before + len(summaries)].billed
                assert billed is not None
                hits.append(billed.prompt_cache_hit_tokens / billed.prompt_tokens)
        return hits


async def test_a_cut_turn_still_hits_the_cache_for_the_system_prompt_and_the_pinned_opening(
    make_harness: MakeHarness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hits counted in whole 64-token blocks at 64-token intervals: what a request shares with an earlier one is
    # what it is billed as hits. A cut turn shares the system prompt, the tools and the pinned opening (window rule
    # 11); without the opening, the system prompt and the tools alone.
    stub_class = functools.partial(PrefixCacheStub, interval_tokens=BLOCK_TOKENS)
    monkeypatch.setitem(make_harness.__wrapped__.__globals__, "DeepSeekStub", stub_class)  # type: ignore[attr-defined]
    pinned = await cut_turn_hits(make_harness, make_user(), head_tokens=1500)
    unpinned = await cut_turn_hits(make_harness, make_user(), head_tokens=0)
    # Measured: 78 % and 82 % on the two cut turns, 68 % on the one cut turn without the opening.
    assert len(pinned) >= 2 and unpinned, (pinned, unpinned)
    assert min(pinned) >= 0.75 and min(pinned) >= max(unpinned) + 0.05, (pinned, unpinned)
