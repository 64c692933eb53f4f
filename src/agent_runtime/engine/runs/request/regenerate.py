"""Regeneration: answer the thread's last user turn again.

The run stores no input row: it runs on the stored last user message. Its start statement (`RunStore.start`)
records the range of the reply it replaces (every visible row after that message: tool calls, results,
answer; migrations/0012), so that the reply leaves the visible thread, the model's history and
MESSAGES_SNAPSHOT, and stays as audit (`GET .../messages?superseded=true`) and billed. A refused request stores
nothing. A regeneration that fails leaves the turn without a visible reply; it can be regenerated again.

Refused with 409 `regenerate_pending` while the turn waits for approvals or frontend tool results (answer
them, or send a new message), 409 `nothing_to_regenerate` on a thread without a user message, and 409
`run_id_taken` under the runId of a run that already ran (a resent request).
"""

from __future__ import annotations

from agent_runtime.engine.errors import ConflictError, ErrorDetail, ValidationFailedError
from agent_runtime.engine.runs.request.models import RunInput, RunRequest
from agent_runtime.engine.runs.request.pending import PendingTurn, SessionAguiState


class RegeneratePendingError(ConflictError):
    code = "regenerate_pending"


class NothingToRegenerateError(ConflictError):
    code = "nothing_to_regenerate"


class RunAlreadyRanError(ConflictError):
    """A regeneration under the `runId` of a run that already ran: a client resending a request whose stream it
    lost (which would pay for an answer it never saw), not one asking for a new answer (that comes with a new id)."""

    code = "run_id_taken"


def refuse_resent_run(run_id: str) -> RunAlreadyRanError:
    return RunAlreadyRanError(
        f"run {run_id} already ran on this thread: resume its events instead of resending it, or regenerate with a "
        "new runId",
        details=[ErrorDetail(loc=["body", "runId"], msg="a run with this id exists")],
    )


def refuse_pending(run_input: RunInput, pending: PendingTurn | None) -> None:
    """A regeneration of a turn that waits for the user or the client is refused: its calls must be answered."""
    if run_input.regenerate and pending is not None:
        raise RegeneratePendingError(
            "the last turn waits for approvals or tool results: answer them, or send a new message",
            details=[ErrorDetail(loc=["body", "regenerate"], msg=f"pending: {', '.join(c.id for c in pending.calls)}")],
        )


def require_regenerable(run_input: RunInput, thread: SessionAguiState | None) -> None:
    """Before the start: the thread has a user turn to answer again, and nothing pending (else 409)."""
    if not run_input.regenerate:
        return
    assert thread is not None, "a regeneration reads the thread first"
    if thread.last_user_id is None:
        raise NothingToRegenerateError(
            "nothing to regenerate",
            details=[ErrorDetail(loc=["body", "regenerate"], msg="the thread has no user message yet")],
        )
    refuse_pending(run_input, thread.pending)


def rest_run_input(body: RunRequest) -> RunInput:
    """The REST body of a regeneration as a run input: `regenerate` alone (with `context` at most)."""
    for name in ("message", "message_id", "images", "resume", "tool_results"):
        if name in body.model_fields_set:
            raise ValidationFailedError(
                "a regeneration takes no new input",
                details=[ErrorDetail(loc=["body", name], msg="not allowed with `regenerate`")],
            )
    return RunInput(context=body.context, regenerate=True)
