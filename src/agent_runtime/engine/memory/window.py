"""The memory window: a pure function from a conversation (oldest first) and a policy to what the model sees.

Rules (the first three are Spring AI's MessageWindowChatMemory, the rest is ours):
1. Only the newest system message is kept (a new, different one replaces older ones; an identical one
   re-added changes nothing), and it always comes first.
2. The system message is never evicted. It counts toward both budgets, because it is sent every time and
   occupies the model's context like any other message; a budget that ignored it could not be trusted.
3. Eviction removes whole turns, oldest first: the window always starts at a user message (after the
   system message). Messages before the first user message belong to no complete turn and are left out.
4. Two budgets, `max_messages` and `max_tokens`, whichever binds first.
5. An assistant message with tool calls and the tool results answering it are kept or evicted together.
   A tool result whose call is not right before it (e.g. its call was cut off) is never included: the
   provider would reject it. A call still waiting for its results is kept as it is.
6. When even the newest turn does not fit, the window is not empty: it keeps that turn's user message and
   the newest of the turn's messages (whole tool groups) that still fit. If the system and user message
   alone exceed a budget, the window is exactly those two and `over_budget` is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.engine.memory.messages import AssistantMessage, ChatMessage, SystemMessage, ToolMessage, UserMessage
from agent_runtime.engine.memory.tokens import TokenCounter, litellm_token_counter


class WindowPolicy(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_messages: int = Field(default=20, ge=1, description="Messages in the window, system message included.")
    max_tokens: int | None = Field(default=None, ge=1, description="Token budget; None counts messages only.")
    model: str = Field(default="deepseek/deepseek-chat", min_length=1, description="Tokenizer to count with.")
    token_counter: TokenCounter | None = Field(
        default=None, exclude=True, repr=False, description="Replaces LiteLLM's counter (tests, other tokenizers)."
    )

    def counter(self) -> TokenCounter:
        return self.token_counter or litellm_token_counter(self.model)


class WindowResult(BaseModel):
    messages: list[ChatMessage]
    token_count: int | None = Field(description="Tokens of `messages`; None when there is no token budget.")
    over_budget: bool = Field(description="Set only when the system and newest user message alone exceed it.")


@dataclass
class _Block:
    """Messages kept or evicted as one: a single message, or an assistant tool call with its results."""

    messages: list[ChatMessage]
    unanswered: set[str] = field(default_factory=set)


@dataclass
class _Turn:
    user: UserMessage
    blocks: list[_Block] = field(default_factory=list)

    def messages(self) -> list[ChatMessage]:
        return [self.user, *(m for block in self.blocks for m in block.messages)]


class _Budget:
    def __init__(self, policy: WindowPolicy) -> None:
        self._policy = policy
        self._counter = policy.counter() if policy.max_tokens is not None else None
        self._tokens_by_message: dict[int, int] = {}
        self.messages = 0
        self.tokens = 0

    def _tokens(self, messages: Sequence[ChatMessage]) -> int:
        if self._counter is None:
            return 0
        total = 0
        for message in messages:
            # Keyed by object identity: a turn measured and then rejected is not counted again.
            if id(message) not in self._tokens_by_message:
                self._tokens_by_message[id(message)] = self._counter(message)
            total += self._tokens_by_message[id(message)]
        return total

    def fits(self, messages: Sequence[ChatMessage]) -> bool:
        if self.messages + len(messages) > self._policy.max_messages:
            return False
        limit = self._policy.max_tokens
        return limit is None or self.tokens + self._tokens(messages) <= limit

    def take(self, messages: Sequence[ChatMessage]) -> None:
        self.messages += len(messages)
        self.tokens += self._tokens(messages)

    @property
    def exceeded(self) -> bool:
        limit = self._policy.max_tokens
        return self.messages > self._policy.max_messages or (limit is not None and self.tokens > limit)


def apply_window(messages: Sequence[ChatMessage], policy: WindowPolicy) -> WindowResult:
    """The window over `messages` (oldest first) under `policy`; see the module docstring for the rules."""
    system = next((m for m in reversed(messages) if isinstance(m, SystemMessage)), None)
    turns = _split_turns([m for m in messages if not isinstance(m, SystemMessage)])
    budget = _Budget(policy)
    head: list[ChatMessage] = [system] if system is not None else []
    budget.take(head)

    kept: list[_Turn] = []
    for turn in reversed(turns):
        turn_messages = turn.messages()
        if not budget.fits(turn_messages):
            break
        budget.take(turn_messages)
        kept.append(turn)
    body = [m for turn in reversed(kept) for m in turn.messages()]
    if not kept and turns:
        body = _newest_turn_part(turns[-1], budget)

    return WindowResult(
        messages=head + body,
        token_count=budget.tokens if policy.max_tokens is not None else None,
        over_budget=budget.exceeded,
    )


def _newest_turn_part(turn: _Turn, budget: _Budget) -> list[ChatMessage]:
    budget.take([turn.user])
    chosen: list[_Block] = []
    for block in reversed(turn.blocks):
        if not budget.fits(block.messages):
            break
        budget.take(block.messages)
        chosen.append(block)
    return [turn.user, *(m for block in reversed(chosen) for m in block.messages)]


def _split_turns(messages: Sequence[ChatMessage]) -> list[_Turn]:
    turns: list[_Turn] = []
    for message in messages:
        if isinstance(message, UserMessage):
            turns.append(_Turn(user=message))
        elif not turns:
            continue
        elif isinstance(message, ToolMessage):
            blocks = turns[-1].blocks
            if blocks and message.tool_call_id in blocks[-1].unanswered:
                blocks[-1].unanswered.discard(message.tool_call_id)
                blocks[-1].messages.append(message)
        elif isinstance(message, AssistantMessage) and message.tool_calls:
            turns[-1].blocks.append(_Block(messages=[message], unanswered={c.id for c in message.tool_calls}))
        else:
            turns[-1].blocks.append(_Block(messages=[message]))
    return turns
