"""Persistence of one run: which model call lands on which row, with its own tokens and cost.

Every model call is recorded on exactly one row, so SQL sums never double count:
- a call that asked for tools -> the visible `tool_call` row (seq > 0), written at once;
- the user-facing answer (organization, or intent on the DIRECT_EXECUTION route) -> the visible
  assistant reply (seq > 0); the raw stage JSON is kept beside it as an audit row without usage;
- every other stage output (intent, execution, rejected attempts) -> an audit row (seq < 0).
JSON outputs wait until the run ends (only then is it known which attempt was valid and which route
was taken) and are written with the run's status in one statement (`engine/runs/ledger/store.py`); on failure they are
all written as audit rows, so a failed run still bills what it used.
"""

from __future__ import annotations

from uuid import UUID

from pydantic import BaseModel

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.metadata import (
    AssistantOutputMetadata,
    AuditMetadata,
    BillingFields,
    ToolCallMetadata,
    ToolCallSpec,
    ToolResultMetadata,
)
from agent_runtime.engine.conversation.store import MessageStore
from agent_runtime.engine.conversation.stored_messages import NewMessage, StoredMessage, unfinished_call_row
from agent_runtime.engine.llm.models import LLMResponse, UnfinishedCall


class StageOutput(BaseModel):
    stage: str
    attempt: int
    response: LLMResponse


class ToolResultRecord(BaseModel):
    message_id: str
    tool_call_id: str
    name: str
    content: str
    is_error: bool
    cancelled: bool = False


class StageOutcomes(BaseModel):
    rejected: list[StageOutput]
    final: dict[str, StageOutput]


def _billed(row: NewMessage, response: LLMResponse) -> NewMessage:
    cost = response.cost
    return row.model_copy(
        update={"input_tokens": cost.input_tokens, "output_tokens": cost.output_tokens, "cost": cost.cost}
    )


class RunRecorder:
    def __init__(self, store: MessageStore, ctx: RequestContext, session_id: UUID, run_id: str) -> None:
        self._store = store
        self._ctx = ctx
        self._session_id = session_id
        self.run_id = run_id
        self._outputs: list[StageOutput] = []
        self._queued: list[NewMessage] = []
        self._tool_results: list[ToolResultRecord] = []
        self._reasoning: list[NewMessage] = []

    async def tool_calls(self, stage: str, response: LLMResponse, calls: list[ToolCallSpec]) -> StoredMessage:
        """Store the model's tool calls at once (with tool results not written yet, in the same statement)."""
        metadata = ToolCallMetadata(
            **BillingFields.of(response.cost).model_dump(),
            tool_calls=calls,
            run_id=self.run_id,
            stage=stage,
            model=response.model,
            reasoning_content=response.reasoning,
        )
        row = NewMessage(role="assistant", content=response.content, metadata=metadata)
        rows = [*self._take_tool_results(), _billed(row, response)]
        return (await self._store.append(self._ctx, self._session_id, rows))[-1]

    def tool_result(self, record: ToolResultRecord) -> None:
        """Queue a tool result (called from a sync event sink); written before the next row."""
        self._tool_results.append(record)

    async def flush_tool_results(self) -> None:
        if self._tool_results:
            await self._store.append(self._ctx, self._session_id, self._take_tool_results())

    def _take_tool_results(self) -> list[NewMessage]:
        pending, self._tool_results = self._tool_results, []
        return [
            NewMessage(
                role="tool",
                content=r.content,
                message_id=r.message_id,
                metadata=ToolResultMetadata(
                    tool_call_id=r.tool_call_id,
                    tool_name=r.name,
                    is_error=r.is_error,
                    run_id=self.run_id,
                    cancelled=True if r.cancelled else None,
                ),
            )
            for r in pending
        ]

    def reasoning(self, stage: str, response: LLMResponse, message_id: str) -> None:
        """Keep a model call's reasoning as an audit row (unbilled: its tokens are on the call's row), under the
        id of the reasoning message streamed for it: a client that sends that message back sends history."""
        if response.reasoning:
            metadata = AuditMetadata(stage=stage, run_id=self.run_id, model=response.model, reasoning=True)
            row = NewMessage(role="assistant", content=response.reasoning, metadata=metadata, message_id=message_id)
            self._reasoning.append(row)

    def _take_reasoning(self) -> list[NewMessage]:
        rows, self._reasoning = self._reasoning, []
        return rows

    def unfinished(self, stage: str, call: UnfinishedCall) -> None:
        """A call cut by a cancel or a fault: its estimated audit row, written with the run's end."""
        self._queued.append(unfinished_call_row(call, stage=stage, run_id=self.run_id))

    def stage_output(self, output: StageOutput) -> None:
        self._outputs.append(output)

    def queue_row(self, row: NewMessage) -> None:
        """A row made before the flow (the memory summary's audit row), written with the run's end."""
        self._queued.append(row)

    def _take_queued(self) -> list[NewMessage]:
        queued, self._queued = self._queued, []
        return queued

    def _audit(self, output: StageOutput, *, billed: bool, error: str | None = None) -> NewMessage:
        response = output.response
        billing = BillingFields.of(response.cost) if billed else BillingFields()
        metadata = AuditMetadata(
            **billing.model_dump(),
            stage=output.stage,
            run_id=self.run_id,
            model=response.model,
            raw_output=response.content,
            error=error,
        )
        row = NewMessage(role="assistant", content=response.content, metadata=metadata)
        return _billed(row, response) if billed else row

    def _outcomes(self) -> StageOutcomes:
        """The last output of each stage is the one its contract accepted; earlier ones were rejected."""
        rejected: list[StageOutput] = []
        final: dict[str, StageOutput] = {}
        for output in self._outputs:
            previous = final.get(output.stage)
            if previous is not None:
                rejected.append(previous)
            final[output.stage] = output
        return StageOutcomes(rejected=rejected, final=final)

    def completed_rows(self, *, answer_stage: str, answer_text: str, message_id: str, demo: bool) -> list[NewMessage]:
        """The rows a successful run writes at its end (with its status, in one statement): tool results not
        written yet, the stage outputs, and the visible reply last."""
        outcomes = self._outcomes()
        rejection = "rejected: did not match the stage contract"
        rejected = [self._audit(o, billed=True, error=rejection) for o in outcomes.rejected]
        rows = [*self._take_queued(), *self._take_tool_results(), *rejected]
        answer = outcomes.final.get(answer_stage)
        rows += [self._audit(o, billed=stage != answer_stage) for stage, o in outcomes.final.items()]
        reply = NewMessage(
            role="assistant",
            content=answer_text,
            message_id=message_id,
            metadata=AssistantOutputMetadata(
                **(BillingFields.of(answer.response.cost) if answer else BillingFields()).model_dump(),
                run_id=self.run_id,
                stage=answer_stage,
                model=answer.response.model if answer else None,
                demo=demo,
                message_id=message_id,
                reasoning_content=answer.response.reasoning if answer else None,
            ),
        )
        if answer is not None:
            reply = _billed(reply, answer.response)
        self._outputs.clear()
        return [*rows, *self._take_reasoning(), reply]

    def suspended_rows(self) -> list[NewMessage]:
        """What a run that stopped for approvals or frontend tools writes at its end: tool results not written
        yet and its stage outputs so far, billed, as audit rows."""
        outcomes = self._outcomes()
        rejection = "rejected: did not match the stage contract"
        rejected = [self._audit(o, billed=True, error=rejection) for o in outcomes.rejected]
        rows = [*self._take_queued(), *self._take_tool_results(), *rejected]
        rows += [self._audit(o, billed=True) for o in outcomes.final.values()]
        self._outputs.clear()
        return [*rows, *self._take_reasoning()]

    def cancelled_rows(self, *, answer_text: str, message_id: str, demo: bool) -> list[NewMessage]:
        """What a cancelled run keeps: tool results, every finished model call (billed) as an audit row, and
        the answer as far as it was streamed, marked partial. The call in flight when the cancel came reported
        no usage (a stream reports it at its end): it is not billed."""
        rows = self.failed_rows("cancelled by the user")
        if answer_text:
            reply = NewMessage(
                role="assistant",
                content=answer_text,
                message_id=message_id,
                metadata=AssistantOutputMetadata(run_id=self.run_id, demo=demo, message_id=message_id, partial=True),
            )
            rows.append(reply)
        return rows

    def failed_rows(self, error: str) -> list[NewMessage]:
        """What a failed run keeps: tool results not written yet, and every model output (and its cost) as
        audit rows."""
        outputs = [self._audit(o, billed=True, error=error) for o in self._outputs]
        rows = [*self._take_queued(), *self._take_tool_results(), *outputs]
        self._outputs.clear()
        return [*rows, *self._take_reasoning()]
