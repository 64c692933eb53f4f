"""Property tests of the cache-aware window (`plan_window` through `MessageWindowChatMemory.window`), run against
both repositories: the in-memory one and the PostgreSQL one used in production (same conversation, same answers).

A conversation is fed one message at a time and the window is read after each, as runs read it: every read
checks that the window is a suffix of the conversation starting at a user turn (or, when the newest turn alone
is over budget, that turn's newest whole groups), with tool groups intact, within both budgets with the
summary's reserve; that its start only moves forward, and only at a cut (exactly when the window from the
previous start no longer fits); that a cut keeps at most the low-water marks (or the newest turn); that the first
cut pins the conversation's opening turns within `head_tokens` (and no later read changes them); and that the
summary is made at a cut, from what the cut dropped after the head, and is kept unchanged until the next one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import User
from tests.conversation.factories import char_tokens, ids
from tests.conversation.test_memory_window_properties import answers, conversations

from agent_runtime.engine.conversation import (
    AssistantMessage,
    ChatMemoryRepository,
    ChatMessage,
    InMemoryChatMemoryRepository,
    MessageWindowChatMemory,
    SystemMessage,
    ToolMessage,
    UserMessage,
    WindowPolicy,
)
from agent_runtime.engine.conversation.postgres import PostgresChatMemoryRepository
from agent_runtime.engine.conversation.summary import SummaryRequest
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate


@st.composite
def cache_policies(draw: st.DrawFn) -> WindowPolicy:
    high = draw(st.integers(2, 12))
    tokens = draw(st.none() | st.integers(20, 200))
    summary = draw(st.none() | st.integers(1, 10)) if tokens is None or tokens > 10 else None
    return WindowPolicy(
        max_messages=high,
        max_tokens=tokens,
        low_messages=draw(st.integers(1, high)),
        low_tokens=None if tokens is None else draw(st.integers(1, tokens)),
        summary_tokens=summary,
        head_tokens=None if tokens is None else draw(st.none() | st.integers(1, (tokens - (summary or 0)) // 2)),
        token_counter=char_tokens,
    )


@st.composite
def head_policies(draw: st.DrawFn) -> WindowPolicy:
    """Policies whose first cut leaves room to pin an opening turn or more (window rule 11)."""
    tokens = draw(st.integers(200, 600))
    summary = draw(st.none() | st.integers(1, 10))
    return WindowPolicy(
        max_messages=draw(st.integers(6, 12)),
        max_tokens=tokens,
        low_messages=draw(st.integers(1, 3)),
        low_tokens=draw(st.integers(1, 60)),
        summary_tokens=summary,
        head_tokens=draw(st.integers(20, (tokens - (summary or 0)) // 2)),
        token_counter=char_tokens,
    )


class CountingSummarizer:
    """Deterministic summaries that say what they covered, so the test can check what a cut summarised."""

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        return f"{request.previous or ''}|{','.join(m.id for m in request.dropped)}"


def _cost(messages: list[ChatMessage]) -> int:
    return sum(char_tokens(m) for m in messages)


def _fits(head: list[ChatMessage], body: list[ChatMessage], policy: WindowPolicy, *, low: bool = False) -> bool:
    reserve_messages = 1 if policy.summary_tokens is not None else 0
    reserve_tokens = policy.summary_tokens or 0
    max_messages = (policy.low_messages or policy.max_messages) if low else policy.max_messages
    max_tokens = (policy.low_tokens or policy.max_tokens) if low else policy.max_tokens
    if len(head) + len(body) > max(1, max_messages - reserve_messages):
        return False
    return max_tokens is None or _cost(head + body) <= max(1, max_tokens - reserve_tokens)


def _from(messages: list[ChatMessage], start_id: str) -> list[ChatMessage]:
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    return rest[next(i for i, m in enumerate(rest) if m.id == start_id) :]


def _check_groups(body: list[ChatMessage], conversation: list[ChatMessage]) -> None:
    for index, message in enumerate(body):
        if isinstance(message, AssistantMessage) and message.tool_calls:
            assert answers(body, message) == answers(conversation, message), "a tool call keeps all its results"
        if isinstance(message, ToolMessage):
            caller = next(m for m in reversed(body[:index]) if not isinstance(m, ToolMessage))
            assert isinstance(caller, AssistantMessage) and message.tool_call_id in {c.id for c in caller.tool_calls}


async def check_growth(
    repository: ChatMemoryRepository, conversation_id: str, conversation: list[ChatMessage], policy: WindowPolicy
) -> None:
    summarizer = CountingSummarizer()
    memory = MessageWindowChatMemory(
        repository, policy, summarizer=summarizer if policy.summary_tokens is not None else None
    )
    stored: list[ChatMessage] = []
    start: str | None = None
    cut_at: str | None = None  # the start of the last cut (what the repository stored); None before the first
    summary: str | None = None
    pinned: list[str] | None = None  # the head's ids, from the first cut on
    for message in conversation:
        await repository.append(conversation_id, [message])
        stored.append(message)
        window = await memory.window(conversation_id)
        systems = [m for m in stored if isinstance(m, SystemMessage)]
        head: list[ChatMessage] = systems[-1:]
        assert ids(window.as_messages()[: len(head)]) == ids(head), "the newest system message comes first"
        users = [m for m in stored if isinstance(m, UserMessage)]
        body = window.messages
        turns = [m for m in stored if not isinstance(m, SystemMessage)]
        turns = turns[turns.index(users[0]) :] if users else []
        if pinned is None and window.cut and cut_at is None:
            pinned = ids(window.head)
            assert policy.head_tokens is not None or pinned == [], "no head without head_tokens"
            assert ids(turns[: len(pinned)]) == pinned, "the head is the conversation's opening"
            assert _cost(window.head) <= (policy.head_tokens or 0), "within head_tokens"
            assert not pinned or isinstance(turns[len(pinned)], UserMessage), "the head is whole turns"
            _check_groups(window.head, stored)
        assert ids(window.head) == (pinned or []), "the head is pinned at the first cut and never changes"
        head = [*head, *window.head]
        if not users:
            assert body == [] and window.start_id is None
            continue
        assert isinstance(body[0], UserMessage) and body[0].id == window.start_id, "starts at a user turn"
        assert users[-1].id in ids(body), "the newest user message is always kept"
        _check_groups(body, stored)
        rest = _from(stored, body[0].id)
        if ids(body) != ids(rest):
            assert body[0].id == users[-1].id, "only the newest turn may be partial"
            assert ids(body[1:]) == ids(rest[len(rest) - len(body) + 1 :]), "its newest whole groups"
        if not window.over_budget:
            assert _fits(head, body, policy), "within both budgets, summary reserve included"
        previous_fits = start is None or _fits(head, _from(stored, start), policy)
        if start is not None and previous_fits and window.start_id != start:
            raise AssertionError("the start moved although the window from it still fitted")
        if window.cut:
            assert start is None or stored.index(next(m for m in stored if m.id == window.start_id)) > stored.index(
                next(m for m in stored if m.id == start)
            ), "the start only moves forward"
            assert not previous_fits or start is None
            assert _fits(head, body, policy, low=True) or body[0].id == users[-1].id, "a cut keeps the low marks"
            if policy.summary_tokens is not None:
                dropped = [m for m in stored if not isinstance(m, SystemMessage)]
                # Without a head, the first cut summarises from the beginning (messages before any turn too).
                after_head = ids(dropped).index(turns[len(pinned)].id) if pinned else 0
                first = ids(dropped).index(cut_at) if cut_at is not None else after_head
                end = ids(dropped).index(body[0].id)
                expected = [m.id for m in dropped[first:end]][-2 * policy.max_messages :]
                if expected or summary is not None:
                    request = summarizer.requests[-1]
                    assert [m.id for m in request.dropped] == expected
                    assert request.previous == summary
                    assert ids(request.head) == (pinned or [])
                    summary = f"{summary or ''}|{','.join(m.id for m in request.dropped)}"
            cut_at = window.start_id
        else:
            assert window.start_id == start or start is None, "the start moves only at a cut"
        assert window.summary == (summary if policy.summary_tokens is not None else None)
        start = window.start_id


@settings(max_examples=150, deadline=None)
@given(conversations(orphans=False, turns=12), cache_policies() | head_policies())
async def test_cache_window_properties_in_memory(conversation: list[ChatMessage], policy: WindowPolicy) -> None:
    await check_growth(InMemoryChatMemoryRepository(), "c1", conversation, policy)


ConversationFactory = Callable[[], Awaitable[str]]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations(orphans=False, turns=12), cache_policies() | head_policies())
async def test_cache_window_properties_on_postgres(
    engine: RuntimeEngine, user: User, conversation: list[ChatMessage], policy: WindowPolicy
) -> None:
    session = await engine.sessions.create(user.ctx, SessionCreate())
    await check_growth(PostgresChatMemoryRepository(engine.pool, user.ctx), str(session.id), conversation, policy)
