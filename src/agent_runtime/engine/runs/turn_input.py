"""Checks on what a run adds to the thread, before the run starts (a refused request leaves nothing behind).

- The plan against the thread's pending turn (turn_plan.py): 409 `interrupt_pending`, 422 for bad resumes.
- A client message id already stored is a 409 (AG-UI input has dropped those before: they are history).
- No message escapes the memory window's token budget: a user message or client tool result may take at
  most half of `MEMORY_MAX_TOKENS` (the rest is for the system prompt and the turn's other messages), else
  a 422 naming the limit. Counting needs LiteLLM's tokenizer, so only a text longer in UTF-8 bytes than the
  limit is counted (a byte-level tokenizer never makes more tokens than bytes).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import ConflictError, ErrorDetail, ValidationFailedError
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.memory.messages import ChatMessage, ChatMetadata
from agent_runtime.engine.memory.postgres import to_new_message
from agent_runtime.engine.messages.models import NewMessage
from agent_runtime.engine.messages.store import MessageStore
from agent_runtime.engine.runs.models import RunInput
from agent_runtime.engine.runs.pending import PendingTurn
from agent_runtime.engine.runs.turn_plan import TurnPlan, plan_turn

# Role framing the tokenizer adds around a message's text.
_FRAMING_TOKENS = 16

TokenCounter = Callable[[ChatMessage], int]


def message_token_limit(memory_max_tokens: int) -> int:
    return max(1, memory_max_tokens // 2)


async def check_token_budget(
    messages: Sequence[ChatMessage], *, limit: int, counter: Callable[[], Awaitable[TokenCounter]]
) -> None:
    for message in messages:
        if len(message.content.encode()) + _FRAMING_TOKENS <= limit:
            continue
        tokens = (await counter())(message)
        if tokens > limit:
            raise ValidationFailedError(
                "message too long",
                details=[
                    ErrorDetail(
                        loc=["body", "messages", message.id, "content"],
                        msg=f"has {tokens} tokens; a message may have at most {limit} tokens "
                        "(half of MEMORY_MAX_TOKENS)",
                        type="too_many_tokens",
                    )
                ],
            )


class TurnInputs:
    def __init__(
        self,
        messages: MessageStore,
        tools: Mapping[str, Tool[Any]],
        *,
        token_limit: int,
        counter: Callable[[], Awaitable[TokenCounter]],
    ) -> None:
        self._messages = messages
        self._tools = tools
        self._token_limit = token_limit
        self._counter = counter

    async def plan(
        self, ctx: RequestContext, session_id: UUID, run_input: RunInput, pending: PendingTurn | None
    ) -> TurnPlan:
        plan = plan_turn(run_input, pending, self._tools)
        ids = [m.id for m in [*run_input.new_messages, *run_input.tool_results]]
        if ids and await self._messages.existing_message_ids(ctx, session_id, ids):
            raise ConflictError("a message with this id is already stored in this session")
        added: list[ChatMessage] = [*run_input.new_messages, *run_input.tool_results]
        await check_token_budget(added, limit=self._token_limit, counter=self._counter)
        return plan


def rows_to_store(run_input: RunInput, plan: TurnPlan, run_id: UUID) -> list[NewMessage]:
    """What the run stores before any model call: results closing abandoned frontend calls (right after the
    call), then the client's tool results, then the new user messages; each stamped with the run id."""
    added: list[ChatMessage] = [*plan.closing_results, *run_input.tool_results, *run_input.new_messages]
    stamp = {"metadata": ChatMetadata(run_id=str(run_id))}
    return [to_new_message(message.model_copy(update=stamp)) for message in added]
