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

`apply_window` is that window over a whole conversation. `plan_window` adds the cache-aware start (the
"high-water / low-water" policy, rules 7-10), which keeps the model's input prefix byte-identical for many
turns so the provider's cache (DeepSeek bills a repeated prefix at 1/50 of the price) keeps hitting:
7. The window starts at a stored start (a user message id; none = the start of the conversation) and grows
   from it while it fits the budgets (`max_messages`/`max_tokens`, the high-water marks).
8. When it no longer fits, it is cut once, in a large step: the new start is the oldest user turn from which
   the newest whole turns fit the low-water marks (`low_messages`/`low_tokens`); the newest turn when even it
   does not fit them. The start only moves forward, and only at a cut; with the low-water marks equal to the
   high-water ones this is the sliding window of `apply_window`, cut one turn at a time.
9. A cut never keeps fewer than the newest `keep_turns` turns (the turn being answered and the exchanges before
   it), whatever the low-water marks say, so the model always has the last exchanges verbatim; this floor wins
   over the budgets too (a window over them then logs `over_budget`, and is cut again at the next read).
10. `summary_tokens` reserves one message and that many tokens of both budgets for a summary of what the
   cuts dropped (placed after the system message by the caller), so the window with it stays in budget.
11. `head_tokens`: the first cut also pins the conversation's opening in front of the summary for good: the oldest
   whole turns that the cut drops, within that many tokens and half the room the cut leaves under the high-water
   marks (so the window still has room to grow). A later cut then keeps the request byte-identical up to the
   head's end, so the provider's cache still covers the system prompt and the head on a cut turn, not the system
   prompt alone. The head counts toward both budgets; only turns after it are cut.
The start (and the head's end) is a pure function of the stored messages and the stored previous start, so every
process (any replica, after any restart) computes the same window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_runtime.engine.conversation.chat_messages import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from agent_runtime.engine.conversation.tokens import TokenCounter, token_counter_for
from agent_runtime.settings import DEEPSEEK_DEFAULT_MODEL


class WindowPolicy(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_messages: int = Field(default=20, ge=1, description="Messages in the window, system message included.")
    max_tokens: int | None = Field(default=None, ge=1, description="Token budget; None counts messages only.")
    low_messages: int | None = Field(
        default=None, ge=1, description="Messages kept by a cut (`plan_window`); None = max_messages (sliding)."
    )
    low_tokens: int | None = Field(
        default=None, ge=1, description="Tokens kept by a cut (`plan_window`); None = max_tokens (sliding)."
    )
    summary_tokens: int | None = Field(
        default=None, ge=1, description="Reserve one message and this many tokens for a summary of dropped turns."
    )
    keep_turns: int = Field(
        default=1,
        ge=1,
        description="Newest turns a cut always keeps (`plan_window`): this one and the exchanges before.",
    )
    head_tokens: int | None = Field(
        default=None, ge=1, description="The opening turns the first cut pins in front of the summary (rule 11)."
    )
    model: str = Field(default=DEEPSEEK_DEFAULT_MODEL, min_length=1, description="Tokenizer to count with.")
    token_counter: TokenCounter | None = Field(
        default=None, exclude=True, repr=False, description="Replaces LiteLLM's counter (tests, other tokenizers)."
    )

    @model_validator(mode="after")
    def _marks_in_order(self) -> WindowPolicy:
        if self.low_messages is not None and self.low_messages > self.max_messages:
            raise ValueError("low_messages must not exceed max_messages")
        if self.low_tokens is not None and (self.max_tokens is None or self.low_tokens > self.max_tokens):
            raise ValueError("low_tokens needs max_tokens and must not exceed it")
        reserve = self.summary_tokens or 0
        if reserve and (self.max_messages < 2 or (self.max_tokens is not None and reserve >= self.max_tokens)):
            raise ValueError("summary_tokens needs max_messages >= 2 and must be below max_tokens")
        if self.head_tokens is not None and (self.max_tokens is None or self.head_tokens + reserve >= self.max_tokens):
            raise ValueError("head_tokens needs max_tokens, and with summary_tokens must stay below it")
        return self

    def counter(self) -> TokenCounter:
        return self.token_counter or token_counter_for(self.model)

    def high(self) -> _Limits:
        return self._limits(self.max_messages, self.max_tokens)

    def low(self) -> _Limits:
        return self._limits(self.low_messages or self.max_messages, self.low_tokens or self.max_tokens)

    def _limits(self, messages: int, tokens: int | None) -> _Limits:
        if self.summary_tokens is None:
            return _Limits(messages=messages, tokens=tokens)
        # The summary takes one message and at most summary_tokens; a low mark below that keeps one turn.
        return _Limits(
            messages=max(1, messages - 1), tokens=None if tokens is None else max(1, tokens - self.summary_tokens)
        )


class WindowResult(BaseModel):
    messages: list[ChatMessage]
    token_count: int | None = Field(description="Tokens of `messages`; None when there is no token budget.")
    over_budget: bool = Field(description="Set only when the system and newest user message alone exceed it.")


@dataclass(frozen=True)
class _Limits:
    messages: int
    tokens: int | None


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
    def __init__(
        self, policy: WindowPolicy, limits: _Limits | None = None, counts: dict[int, int] | None = None
    ) -> None:
        self._limits = limits or policy.high()
        self._counter = policy.counter() if policy.max_tokens is not None else None
        self._tokens_by_message: dict[int, int] = {} if counts is None else counts
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
        if self.messages + len(messages) > self._limits.messages:
            return False
        limit = self._limits.tokens
        return limit is None or self.tokens + self._tokens(messages) <= limit

    def take(self, messages: Sequence[ChatMessage]) -> None:
        self.messages += len(messages)
        self.tokens += self._tokens(messages)

    def took(self, messages: Sequence[ChatMessage]) -> _Budget:
        self.take(messages)
        return self

    @property
    def counts(self) -> dict[int, int]:
        """Token counts by message identity, to share with another budget over the same messages."""
        return self._tokens_by_message

    @property
    def exceeded(self) -> bool:
        limit = self._limits.tokens
        return self.messages > self._limits.messages or (limit is not None and self.tokens > limit)


def apply_window(messages: Sequence[ChatMessage], policy: WindowPolicy) -> WindowResult:
    """The window over `messages` (oldest first) under `policy`; see the module docstring for the rules."""
    system = next((m for m in reversed(messages) if isinstance(m, SystemMessage)), None)
    turns = _split_turns([m for m in messages if not isinstance(m, SystemMessage)])
    budget = _Budget(policy)
    head: list[ChatMessage] = [system] if system is not None else []
    budget.take(head)
    return _result(policy, head, _fit_turns(turns, budget), budget)


def _fit_turns(turns: Sequence[_Turn], budget: _Budget) -> list[ChatMessage]:
    """The newest whole turns that fit `budget`; failing that, the newest part of the newest turn (rule 6)."""
    kept: list[_Turn] = []
    for turn in reversed(turns):
        turn_messages = turn.messages()
        if not budget.fits(turn_messages):
            break
        budget.take(turn_messages)
        kept.append(turn)
    if not kept and turns:
        return _newest_turn_part(turns[-1], budget)
    return [m for turn in reversed(kept) for m in turn.messages()]


def _result(policy: WindowPolicy, head: list[ChatMessage], body: list[ChatMessage], budget: _Budget) -> WindowResult:
    return WindowResult(
        messages=head + body,
        token_count=budget.tokens if policy.max_tokens is not None else None,
        over_budget=budget.exceeded,
    )


class WindowPlan(BaseModel):
    """`plan_window`'s answer: the window, where it starts, and whether this read moved the start."""

    window: WindowResult
    start_id: str | None = Field(description="The user message the window starts at; None without a user message.")
    cut: bool = Field(description="The start moved forward at this read (store it; summarise what it dropped).")
    head: list[ChatMessage] = Field(
        default_factory=list, description="The pinned opening turns (rule 11), in `window` after the system message."
    )
    head_end_id: str | None = Field(
        default=None, description="This read pinned the head: the user message after it (what the cut dropped begins)."
    )


def plan_window(
    messages: Sequence[ChatMessage],
    policy: WindowPolicy,
    start_id: str | None,
    *,
    complete: bool = True,
    head: Sequence[ChatMessage] = (),
    first_cut: bool = False,
) -> WindowPlan:
    """The cache-aware window over `messages` (oldest first) from the stored start `start_id` (rules 7-11).

    `messages` may be a bounded read: everything from the start (`complete`), or, when there is more than
    the high-water mark, only the newest messages (`complete=False`, and then a cut is due). `head` is the pinned
    opening (the turns before the first cut's summary), read apart from `messages`; `first_cut` says that no cut
    was stored yet, so a cut may pin one (`policy.head_tokens`) when `messages` begin with the first turn.
    """
    system = next((m for m in reversed(messages) if isinstance(m, SystemMessage)), None)
    turns = _split_turns([m for m in messages if not isinstance(m, SystemMessage)])
    pinned = [m for turn in _split_turns(head) for m in turn.messages()]
    front: list[ChatMessage] = [system] if system is not None else []
    high = _Budget(policy)
    high.take([*front, *pinned])
    counts = high.counts
    # Only a read that holds the conversation's first turn can pin it (a bounded read may begin later).
    opening_read = bool(turns) and (turns[0].user.id == start_id if start_id is not None else complete)
    if start_id is None and complete and turns:
        start_id = turns[0].user.id  # no start given: the conversation's first turn
    first = next((i for i, t in enumerate(turns) if t.user.id == start_id), None) if start_id is not None else 0
    if first is not None and complete:
        candidate = [m for turn in turns[first:] for m in turn.messages()]
        if high.fits(candidate):
            high.take(candidate)
            window = _result(policy, [*front, *pinned], candidate, high)
            return WindowPlan(window=window, start_id=_first_id(candidate), cut=False, head=pinned)
    body = _cut(turns, [*front, *pinned], policy, counts)
    head_end_id: str | None = None
    if first_cut and opening_read and not pinned and policy.head_tokens is not None:
        pinned = _opening(turns, [*front, *body], policy, counts)
        body = _cut(turns[len(_split_turns(pinned)) :], [*front, *pinned], policy, counts)
        head_end_id = _after_head(turns, pinned) if pinned else None
    final = _Budget(policy, policy.high(), counts).took([*front, *pinned])
    final.take(body)
    new_start = _first_id(body)
    return WindowPlan(
        window=_result(policy, [*front, *pinned], body, final),
        start_id=new_start,
        cut=new_start != start_id,
        head=pinned,
        head_end_id=head_end_id,
    )


def _opening(
    turns: Sequence[_Turn], window: list[ChatMessage], policy: WindowPolicy, counts: dict[int, int]
) -> list[ChatMessage]:
    """The oldest whole turns that the cut to `window` (system message and kept turns) drops, within `head_tokens`
    and half the room that window leaves under the high-water marks, so that it keeps room to grow (rule 11)."""
    high, cut = policy.high(), _Budget(policy, policy.high(), counts).took(window)
    room = _Limits(
        messages=(high.messages - cut.messages) // 2,
        tokens=min(policy.head_tokens or 0, (high.tokens - cut.tokens) // 2 if high.tokens is not None else 0),
    )
    budget = _Budget(policy, room, counts)
    kept = next((m.id for m in window if isinstance(m, UserMessage)), None)
    opening: list[ChatMessage] = []
    for turn in turns:
        if turn.user.id == kept or not budget.fits(turn.messages()):
            break
        budget.take(turn.messages())
        opening += turn.messages()
    return opening


def _after_head(turns: Sequence[_Turn], head: Sequence[ChatMessage]) -> str | None:
    ids = {m.id for m in head}
    return next((t.user.id for t in turns if t.user.id not in ids), None)


def _cut(
    turns: Sequence[_Turn], head: list[ChatMessage], policy: WindowPolicy, counts: dict[int, int]
) -> list[ChatMessage]:
    """The newest whole turns that fit the low-water marks, and never fewer than `keep_turns` (rule 9); when
    only the newest turn is kept and it does not fit the high-water marks, its newest part (rule 6)."""
    low = _Budget(policy, policy.low(), counts).took(head)
    kept: list[_Turn] = []
    for turn in reversed(turns):
        if len(kept) >= policy.keep_turns and not low.fits(turn.messages()):
            break
        low.take(turn.messages())
        kept.append(turn)
    if len(kept) > 1 or not turns:
        return [m for turn in reversed(kept) for m in turn.messages()]
    return _fit_turns(turns[-1:], _Budget(policy, policy.high(), counts).took(head))


def _first_id(body: Sequence[ChatMessage]) -> str | None:
    return body[0].id if body else None


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
