from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import User
from tests.conversation.factories import char_tokens, ids

from agent_runtime.engine.conversation import (
    AssistantMessage,
    ChatMessage,
    InMemoryChatMemoryRepository,
    MessageWindowChatMemory,
    SystemMessage,
    ToolCallSpec,
    ToolMessage,
    UserMessage,
    WindowPolicy,
    apply_window,
)
from agent_runtime.engine.conversation.postgres import PostgresChatMemoryRepository
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate

TEXT = st.text(alphabet="ab xyz", max_size=40)
UNLIMITED = WindowPolicy(max_messages=10**6, token_counter=char_tokens)


@st.composite
def conversations(draw: st.DrawFn, *, orphans: bool = True, turns: int = 6) -> list[ChatMessage]:
    """Turns of replies and tool groups (some still pending), with system messages and orphans mixed in."""
    counter = itertools.count()

    def new_id(prefix: str) -> str:
        return f"{prefix}{next(counter)}"

    def orphan() -> ToolMessage:
        return ToolMessage(id=new_id("o"), tool_call_id=new_id("missing"), content=draw(TEXT))

    messages: list[ChatMessage] = []
    if draw(st.booleans()):
        before_any_user: list[ChatMessage] = [AssistantMessage(id=new_id("a"), content="hello"), orphan()]
        messages.append(draw(st.sampled_from(before_any_user)))
    for _ in range(draw(st.integers(0, turns))):
        if draw(st.integers(0, 3)) == 0:
            content = draw(st.sampled_from(["rules", "other rules"]))
            messages.append(SystemMessage(id=new_id("s"), content=content))
        messages.append(UserMessage(id=new_id("u"), content=draw(TEXT)))
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["reply", "tools", "orphan"] if orphans else ["reply", "tools"]))
            if kind == "reply":
                messages.append(AssistantMessage(id=new_id("a"), content=draw(TEXT)))
            elif kind == "orphan":
                messages.append(orphan())
            else:
                call_ids = [new_id("k") for _ in range(draw(st.integers(1, 3)))]
                specs = [ToolCallSpec(id=k, name="search", arguments=draw(TEXT)) for k in call_ids]
                messages.append(AssistantMessage(id=new_id("c"), tool_calls=specs))
                for k in call_ids[: draw(st.integers(0, len(call_ids)))]:
                    messages.append(ToolMessage(id=new_id("r"), tool_call_id=k, content=draw(TEXT)))
    return messages


policies = st.builds(
    WindowPolicy,
    max_messages=st.integers(1, 12),
    max_tokens=st.none() | st.integers(1, 200),
    token_counter=st.just(char_tokens),
)


def answers(messages: list[ChatMessage], call: AssistantMessage) -> list[str]:
    """Ids of the tool results right after `call` (in its run of tool messages) that answer it."""
    start = next(i for i, m in enumerate(messages) if m.id == call.id) + 1
    run = itertools.takewhile(lambda m: isinstance(m, ToolMessage), messages[start:])
    wanted = {c.id for c in call.tool_calls}
    return [m.id for m in run if isinstance(m, ToolMessage) and m.tool_call_id in wanted]


def fits(messages: list[ChatMessage], policy: WindowPolicy) -> bool:
    tokens = sum(char_tokens(m) for m in messages)
    return len(messages) <= policy.max_messages and (policy.max_tokens is None or tokens <= policy.max_tokens)


@settings(max_examples=200, deadline=None)
@given(conversations(), policies)
def test_window_invariants(conversation: list[ChatMessage], policy: WindowPolicy) -> None:
    outcome = apply_window(conversation, policy)
    clean = apply_window(conversation, UNLIMITED).messages
    systems = [m for m in conversation if isinstance(m, SystemMessage)]
    users = [m for m in conversation if isinstance(m, UserMessage)]
    head = systems[-1:]
    assert outcome.messages[: len(head)] == head, "the newest system message is first"
    body = outcome.messages[len(head) :]
    clean_body = clean[len(head) :]
    assert not any(isinstance(m, SystemMessage) for m in body)

    if not users:
        assert body == []
        return
    assert isinstance(body[0], UserMessage), "the window starts at a user turn"
    assert users[-1] in body, "the newest user message is always kept"

    for message in body:
        if isinstance(message, AssistantMessage) and message.tool_calls:
            assert answers(body, message) == answers(conversation, message), "a tool call keeps all its results"
    for index, message in enumerate(body):
        if isinstance(message, ToolMessage):
            caller = next(m for m in reversed(body[:index]) if not isinstance(m, ToolMessage))
            assert isinstance(caller, AssistantMessage)
            assert message.tool_call_id in {c.id for c in caller.tool_calls}, "no orphan tool result"

    if policy.max_tokens is not None:
        assert outcome.token_count == sum(char_tokens(m) for m in outcome.messages)
    if outcome.over_budget:
        assert not fits(outcome.messages, policy)
        assert body == [users[-1]], "over budget only as system + newest user message"
    else:
        assert fits(outcome.messages, policy)

    if body[0] is users[-1]:
        rest = body[1:]
        assert rest == clean_body[len(clean_body) - len(rest) :], "the newest turn keeps its newest whole groups"
    else:
        assert body == clean_body[len(clean_body) - len(body) :], "older turns are kept whole, newest first"
        start = len(clean_body) - len(body)
        if start > 0:
            previous_user = max(i for i in range(start) if isinstance(clean_body[i], UserMessage))
            assert not fits([*head, *clean_body[previous_user:]], policy), "no whole turn that fits was evicted"
    if fits(clean, policy):
        assert outcome.messages == clean


@settings(max_examples=100, deadline=None)
@given(conversations(orphans=False), policies)
async def test_memory_window_from_bounded_read_equals_window_over_whole_conversation(
    conversation: list[ChatMessage], policy: WindowPolicy
) -> None:
    repository = InMemoryChatMemoryRepository()
    await repository.append("c1", conversation)
    memory = MessageWindowChatMemory(repository, policy)
    assert ids(await memory.get("c1")) == ids(apply_window(conversation, policy).messages)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations(orphans=False), policies)
async def test_postgres_window_from_bounded_read_equals_window_over_whole_conversation(
    engine: RuntimeEngine, user: User, conversation: list[ChatMessage], policy: WindowPolicy
) -> None:
    """The production query (PostgresChatMemoryRepository) answers what the in-memory repository does: the
    newest system message first (a query picking the oldest fails here), whole turns, tool groups intact."""
    session = await engine.sessions.create(user.ctx, SessionCreate())
    repository = PostgresChatMemoryRepository(engine.pool, user.ctx)
    await repository.append(str(session.id), conversation)
    memory = MessageWindowChatMemory(repository, policy)
    assert ids(await memory.get(str(session.id))) == ids(apply_window(conversation, policy).messages)
