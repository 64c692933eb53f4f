"""AG-UI `RunAgentInput` into our run input. The server's stored history is the truth:

- a message already stored (matched by id) is never changed, whatever the client's copy says;
- of the others, only user messages (a new turn) and tool messages answering a frontend tool call still
  pending on the thread are taken; system, developer, assistant, reasoning and activity messages, and tool
  messages that answer nothing pending, are neither stored nor shown to the model, and the run says so
  (`RunInput.ignored`: a CUSTOM `input_ignored` event and a log line with the request id);
- every text anywhere in the input (ids, contents, tool calls, context, tools, state, resume...) must be
  storable: NUL or a lone surrogate is a 422 naming the field, before anything is stored;
- a regeneration (AG-UI has no field for it: clients drop the reply and send the thread up to the user message
  it answered): an input with no new user message, tool result or resume entry whose last message is the
  thread's last stored user message, or any input with `forwardedProps.regenerate: true` and nothing new
  (request/regenerate.py; with something new, that flag is a 422);
- a hydrate (a client reconnecting to a thread: docs/api.md, "Reconnecting to a thread"): an input with nothing
  new that is not a regeneration (its messages are empty, or end with anything but the thread's last stored
  user message), or one whose thread has a live run (a regeneration of the turn being answered cannot run), or
  `forwardedProps.hydrate: true` with nothing new (with something new, or with `regenerate`, a 422). It runs
  nothing: the stream says what the thread is (`agui/hydrate.py`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Set
from uuid import UUID

import ag_ui.core as agui
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.chat_messages import ImageAttachment, ToolMessage, UserMessage
from agent_runtime.engine.conversation.convert import from_agui
from agent_runtime.engine.errors import ErrorDetail, ValidationFailedError
from agent_runtime.engine.runs.events.state import RUN_STATE_KEY
from agent_runtime.engine.runs.request.frontend_tools import frontend_tools
from agent_runtime.engine.runs.request.images import content_parts
from agent_runtime.engine.runs.request.models import (
    MAX_CONTEXT_ITEMS,
    MAX_MESSAGE_CHARS,
    MAX_NEW_MESSAGES,
    MAX_RESUME_ENTRIES,
    ContextItem,
    IgnoredMessage,
    ResumeDecision,
    RunInput,
)
from agent_runtime.engine.runs.request.pending import PendingStore, PendingTurn, SessionAguiState
from agent_runtime.engine.text import ERROR_TYPE, first_unstorable
from agent_runtime.logging_setup import request_id_var

log = logging.getLogger(__name__)

# The client's AG-UI state is data kept on the session; 16 KiB holds a UI's selections and drafts.
MAX_CLIENT_STATE_BYTES = 16_384

_IGNORED_ROLES = {
    "system": "system instructions come from the server only",
    "developer": "developer instructions come from the server only",
    "assistant": "assistant messages are written by the server only",
    "reasoning": "reasoning is written by the server only",
    "activity": "activity messages are not part of the conversation",
}


def _invalid(message: str, loc: list[str | int], msg: str) -> ValidationFailedError:
    return ValidationFailedError(message, details=[ErrorDetail(loc=loc, msg=msg)])


class AguiRunInput(agui.RunAgentInput):
    """ag-ui-protocol's `RunAgentInput`, with `threadId` documented as what it must be here: a session's UUID.
    The type stays `str` (the protocol's), so that the check below answers with its own message."""

    # What Swagger UI's "Try it out" sends (put one of your sessions' ids in `threadId`); generated from the
    # schema, it was a body of random strings.
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "threadId": "3f1a0e4e-8d7c-4b8e-9a51-2c0f7c1c9e11",
                    "runId": "9d5c7a3e-2b1f-4e6d-8a9c-0f1e2d3c4b5a",
                    "messages": [{"id": "msg-1", "role": "user", "content": "What is 12 * 7?"}],
                    "tools": [],
                    "context": [],
                    "state": {},
                    "forwardedProps": {},
                }
            ]
        }
    )

    thread_id: str = Field(json_schema_extra={"format": "uuid"})


def thread_session_id(agui_input: agui.RunAgentInput) -> UUID:
    try:
        return UUID(agui_input.thread_id)
    except ValueError as exc:
        raise _invalid(
            "threadId must be a session UUID", ["body", "threadId"], "must be a UUID (the session id)"
        ) from exc


def check_agui_input(agui_input: agui.RunAgentInput) -> None:
    """What needs no database: storable text everywhere, unique message ids, bounded lists."""
    found = first_unstorable(agui_input.model_dump(by_alias=True), ["body"])
    if found is not None:
        raise ValidationFailedError(
            "invalid text", details=[ErrorDetail(loc=found.loc, msg=found.problem, type=ERROR_TYPE)]
        )
    seen: set[str] = set()
    for index, message in enumerate(agui_input.messages):
        if message.id in seen:
            raise _invalid("duplicate message id", ["body", "messages", index, "id"], f"{message.id!r} is repeated")
        seen.add(message.id)
    if len(agui_input.resume or []) > MAX_RESUME_ENTRIES:
        raise _invalid("too many resume entries", ["body", "resume"], f"at most {MAX_RESUME_ENTRIES}")


def is_legacy_client(declared: str | None) -> bool:
    """A client from before 1.0: no `protocolVersion` (it came with 1.0), or one older than 1.0. A declaration
    that cannot be read counts as newer (basic/versioning: proceed as with a newer one)."""
    if declared is None:
        return True
    major, dot, minor = declared.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        return False
    return int(major) < 1


def _client_state(state: object) -> dict[str, JsonValue] | None:
    if state is None:
        return None
    if not isinstance(state, dict):
        raise _invalid("invalid state", ["body", "state"], "must be a JSON object")
    kept = {key: value for key, value in state.items() if key != RUN_STATE_KEY}
    if len(json.dumps(kept, ensure_ascii=False).encode()) > MAX_CLIENT_STATE_BYTES:
        raise _invalid("state too large", ["body", "state"], f"must be at most {MAX_CLIENT_STATE_BYTES} bytes of JSON")
    return kept


def _user_message(index: int, message: agui.UserMessage) -> UserMessage:
    loc: list[str | int] = ["body", "messages", index, "content"]
    images: list[ImageAttachment] = []
    if not isinstance(message.content, str):
        # Image parts are taken here (request/images.py checks them before the run); memory's converter takes text.
        parts = content_parts(message.content, loc)
        images = parts.images
        message = message.model_copy(update={"content": parts.text})
    converted = from_agui(message)
    assert isinstance(converted, UserMessage)
    if len(converted.content) > MAX_MESSAGE_CHARS or not (converted.content or images):
        raise _invalid("invalid user message", loc, f"a user message must have 1 to {MAX_MESSAGE_CHARS} characters")
    return converted.model_copy(update={"images": images})


def _tool_result(index: int, message: agui.ToolMessage) -> ToolMessage:
    converted = from_agui(message)
    assert isinstance(converted, ToolMessage)
    if len(converted.content) > MAX_MESSAGE_CHARS:
        loc: list[str | int] = ["body", "messages", index, "content"]
        raise _invalid("invalid tool result", loc, f"a tool result must have at most {MAX_MESSAGE_CHARS} characters")
    return converted


def _resume(entries: list[agui.ResumeEntry] | None) -> list[ResumeDecision]:
    decisions = []
    for index, entry in enumerate(entries or []):
        try:
            decisions.append(
                ResumeDecision(interrupt_id=entry.interrupt_id, status=entry.status, payload=entry.payload)
            )
        except ValidationError as exc:
            raise _invalid("invalid resume entry", ["body", "resume", index], str(exc.errors()[0]["msg"])) from None
    return decisions


def _regenerate(agui_input: agui.RunAgentInput, *, nothing_new: bool, last_user_id: str | None) -> bool:
    props = agui_input.forwarded_props
    asked = isinstance(props, dict) and props.get("regenerate") is True
    if asked and not nothing_new:
        raise _invalid(
            "a regeneration takes no new input",
            ["body", "forwardedProps", "regenerate"],
            "not allowed with new user messages, tool results or resume entries",
        )
    last = agui_input.messages[-1] if agui_input.messages else None
    truncated = isinstance(last, agui.UserMessage) and last_user_id is not None and last.id == last_user_id
    return nothing_new and (asked or truncated)


def run_input_from_agui(
    agui_input: agui.RunAgentInput,
    *,
    stored_ids: Set[str],
    pending: PendingTurn | None,
    server_tools: Collection[str],
    offer_tools: bool = True,
    last_user_id: str | None = None,
) -> RunInput:
    """What the run takes from the input, given the thread's stored message ids, pending turn and last user
    message, for an input that is not a hydrate (`is_hydrate`); `offer_tools`: AGUI_FRONTEND_TOOLS (off: the
    client's tools are not offered to the model)."""
    waiting = {call.id for call in pending.of_kind("frontend")} if pending is not None else set()
    new: list[UserMessage] = []
    results: list[ToolMessage] = []
    ignored: list[IgnoredMessage] = []
    for index, message in enumerate(agui_input.messages):
        if message.id in stored_ids:
            continue
        if isinstance(message, agui.UserMessage):
            new.append(_user_message(index, message))
        elif isinstance(message, agui.ToolMessage) and message.tool_call_id in waiting:
            waiting.discard(message.tool_call_id)
            results.append(_tool_result(index, message))
        else:
            reason = _IGNORED_ROLES.get(message.role, "answers no pending tool call")
            ignored.append(IgnoredMessage(id=message.id, role=message.role, reason=reason))
    if len(new) > MAX_NEW_MESSAGES:
        raise _invalid("too many new messages", ["body", "messages"], f"at most {MAX_NEW_MESSAGES} new user messages")
    resume = _resume(agui_input.resume)
    regenerate = _regenerate(agui_input, nothing_new=not (new or results or resume), last_user_id=last_user_id)
    assert new or results or resume or regenerate, "an input with nothing to run is a hydrate (is_hydrate)"
    context = [ContextItem(description=c.description[:200], value=c.value[:2_000]) for c in agui_input.context or []]
    try:
        client_run_id: UUID | None = UUID(agui_input.run_id)
    except ValueError:
        client_run_id = None
    return RunInput(
        legacy=is_legacy_client(agui_input.protocol_version),
        new_messages=new,
        tool_results=results,
        resume=resume,
        context=context[:MAX_CONTEXT_ITEMS],
        frontend_tools=frontend_tools(agui_input.tools, server_tools) if offer_tools else [],
        client_state=_client_state(agui_input.state),
        ignored=ignored,
        run_id=client_run_id,
        regenerate=regenerate,
    )


def _has_new_input(agui_input: agui.RunAgentInput, stored_ids: Set[str], pending: PendingTurn | None) -> bool:
    waiting = {call.id for call in pending.of_kind("frontend")} if pending is not None else set()
    for message in agui_input.messages:
        if message.id in stored_ids:
            continue
        if isinstance(message, agui.UserMessage):
            return True
        if isinstance(message, agui.ToolMessage) and message.tool_call_id in waiting:
            return True
    return bool(agui_input.resume)


def is_hydrate(agui_input: agui.RunAgentInput, thread: SessionAguiState) -> bool:
    """Whether the input asks for the thread as it is rather than a run (the module's docstring says when)."""
    props = agui_input.forwarded_props if isinstance(agui_input.forwarded_props, dict) else {}
    asked, regenerate = props.get("hydrate") is True, props.get("regenerate") is True
    new = _has_new_input(agui_input, thread.stored_ids, thread.pending)
    if asked and (new or regenerate):
        raise _invalid(
            "a hydrate takes no new input",
            ["body", "forwardedProps", "hydrate"],
            "not allowed with new user messages, tool results, resume entries or `regenerate`",
        )
    if asked:
        return True
    if new or regenerate:
        return False
    if thread.running:
        return True
    last = agui_input.messages[-1] if agui_input.messages else None
    return not (isinstance(last, agui.UserMessage) and last.id == thread.last_user_id)


class AguiRequest(BaseModel):
    session_id: UUID
    # None: a hydrate (`is_hydrate`), nothing to run.
    run_input: RunInput | None
    thread: SessionAguiState


async def read_agui_input(
    ctx: RequestContext,
    agui_input: agui.RunAgentInput,
    pending: PendingStore,
    *,
    server_tools: Collection[str],
    offer_tools: bool = True,
) -> AguiRequest:
    """Check the input, read the thread (its pending turn and which of the input's ids it stores, in one
    read; 404 when it is not the caller's session), and take from the input what the run may."""
    check_agui_input(agui_input)
    session_id = thread_session_id(agui_input)
    thread = await pending.load(ctx, session_id, [m.id for m in agui_input.messages])
    if is_hydrate(agui_input, thread):
        return AguiRequest(session_id=session_id, run_input=None, thread=thread)
    run_input = run_input_from_agui(
        agui_input,
        stored_ids=thread.stored_ids,
        pending=thread.pending,
        server_tools=server_tools,
        offer_tools=offer_tools,
        last_user_id=thread.last_user_id,
    )
    if run_input.ignored:
        # Named explicitly: ops match this line to the response's X-Request-ID.
        log.warning(
            "client messages ignored",
            extra={
                "request_id": request_id_var.get(),
                "session_id": str(session_id),
                "ignored": [m.model_dump() for m in run_input.ignored],
            },
        )
    return AguiRequest(session_id=session_id, run_input=run_input, thread=thread)
