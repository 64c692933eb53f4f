"""AG-UI `RunAgentInput` into our run input: the checks `POST /v1/sessions/{id}/runs` gets from its body model."""

from __future__ import annotations

from collections.abc import Set
from uuid import UUID

from ag_ui.core import RunAgentInput

from agent_runtime.engine.errors import ErrorDetail, ValidationFailedError
from agent_runtime.engine.memory.convert import from_agui
from agent_runtime.engine.memory.messages import ChatMessage, UserMessage
from agent_runtime.engine.runs.models import MAX_CONTEXT_ITEMS, MAX_MESSAGE_CHARS, ContextItem, RunInput
from agent_runtime.engine.text import NUL


def _invalid(message: str, loc: list[str | int], msg: str) -> ValidationFailedError:
    return ValidationFailedError(message, details=[ErrorDetail(loc=loc, msg=msg)])


def thread_session_id(agui_input: RunAgentInput) -> UUID:
    try:
        return UUID(agui_input.thread_id)
    except ValueError as exc:
        raise _invalid(
            "threadId must be a session UUID", ["body", "threadId"], "must be a UUID (the session id)"
        ) from exc


def run_input_from_agui(agui_input: RunAgentInput, stored_ids: Set[str]) -> RunInput:
    """The messages not stored yet (matched by id; the last must be the user's turn), the context, and the
    client's runId when it can also be our run id (a UUID), so RUN_STARTED/RUN_FINISHED echo it."""
    new: list[ChatMessage] = []
    for index, message in enumerate(agui_input.messages):
        if message.id in stored_ids:
            continue
        new.append(from_agui(message))
        loc: list[str | int] = ["body", "messages", index, "content"]
        if NUL in new[-1].content:
            raise _invalid("invalid message", loc, "must not contain NUL characters")
        if isinstance(new[-1], UserMessage) and not 1 <= len(new[-1].content) <= MAX_MESSAGE_CHARS:
            raise _invalid("invalid user message", loc, f"a user message must have 1 to {MAX_MESSAGE_CHARS} characters")
    for index, item in enumerate(agui_input.context or []):
        if NUL in item.description or NUL in item.value:
            raise _invalid("invalid context", ["body", "context", index], "must not contain NUL characters")
    if not new or not isinstance(new[-1], UserMessage):
        raise _invalid(
            "no new user message to run on", ["body", "messages"], "must end with a user message not stored yet"
        )
    context = [ContextItem(description=c.description[:200], value=c.value[:2_000]) for c in agui_input.context or []]
    try:
        client_run_id: UUID | None = UUID(agui_input.run_id)
    except ValueError:
        client_run_id = None
    return RunInput(new_messages=new, context=context[:MAX_CONTEXT_ITEMS], run_id=client_run_id)
