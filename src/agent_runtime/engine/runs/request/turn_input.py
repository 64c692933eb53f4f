"""What a run adds to the thread, checked before the run starts (a refused request leaves nothing behind).

- No message escapes the memory window's token budget: a user message or client tool result may take at
  most half of `MEMORY_MAX_TOKENS` (the rest is for the system prompt and the turn's other messages), else
  a 422 naming the limit. Counting needs LiteLLM's tokenizer, so only a text longer in UTF-8 bytes than the
  limit is counted (a byte-level tokenizer never makes more tokens than bytes).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from uuid import UUID

from agent_runtime.engine.conversation.chat_messages import ChatMessage, ChatMetadata
from agent_runtime.engine.conversation.postgres import to_new_message
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.errors import ErrorDetail, ValidationFailedError
from agent_runtime.engine.runs.request.images import ImagePolicy, check_message_images
from agent_runtime.engine.runs.request.models import RunInput
from agent_runtime.engine.runs.request.plan import TurnPlan

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


async def check_turn_input(
    run_input: RunInput, *, limit: int, counter: Callable[[], Awaitable[TokenCounter]], images: ImagePolicy
) -> RunInput:
    """The run's input with its images checked (limits, types, models that see them), and every added text
    within the token budget; the input as it is to be stored."""
    checked = run_input.model_copy(update={"new_messages": check_message_images(run_input.new_messages, images)})
    await check_token_budget([*checked.new_messages, *checked.tool_results], limit=limit, counter=counter)
    return checked


def rows_to_store(run_input: RunInput, plan: TurnPlan, run_id: UUID) -> list[NewMessage]:
    """What the run stores before any model call: the tool results (closing the suspended reply's calls when
    the user moved on, the client's own among them; else the client's results continuing the turn), then the
    new user messages; each stamped with the run id."""
    results = run_input.tool_results if plan.continues else plan.closing_results
    added: list[ChatMessage] = [*results, *run_input.new_messages]
    stamp = {"metadata": ChatMetadata(run_id=str(run_id))}
    return [to_new_message(message.model_copy(update=stamp)) for message in added]
