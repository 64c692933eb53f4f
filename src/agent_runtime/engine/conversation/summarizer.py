"""Summaries from the configured model, for the run path: one call per cut, recorded like every model call.

The call is the summary task (`memory_summary` in config/crewai/tasks.yaml: its model, thinking and `max_tokens`)
in JSON mode, after the turns it condenses (`summary.summary_request_messages`), with the run's tools and end-user id
like every call of the run, so its prompt starts with the bytes the previous turns' calls started with (the
provider's cache). Its tokens and cost go on an audit row (seq < 0, stage `memory_summary`, the run's id) handed to
`record` (the run writes it with its end, in the same statement as its other rows, so the run's and the session's
usage include it). An answer that does not match the contract (blank, cut at the output limit, not JSON) is recorded
too (with its error) and asked again with a repair turn, at most `max_repairs` times; then it raises, and the cut is
retried at the next turn. A call cut by a fault is recorded with its estimated usage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_runtime.engine.conversation.chat_messages import AssistantMessage, ChatMessage, SystemMessage, UserMessage
from agent_runtime.engine.conversation.convert import to_wire
from agent_runtime.engine.conversation.metadata import AuditMetadata, BillingFields
from agent_runtime.engine.conversation.stored_messages import NewMessage, unfinished_call_row
from agent_runtime.engine.conversation.summary import (
    ConversationSummary,
    SummaryRequest,
    summary_message,
    summary_request_messages,
)
from agent_runtime.engine.conversation.tokens import TokenCounter
from agent_runtime.engine.llm.client import LLMClient
from agent_runtime.engine.llm.models import (
    BeforeSend,
    CallOptions,
    LLMRequest,
    LLMResponse,
    ToolSchema,
    UnfinishedCall,
    WireMessage,
)
from agent_runtime.engine.llm.repair import repair_text, schema_title, strip_code_fence, unusable_answer

SUMMARY_STAGE = "memory_summary"
_CONTRACT = schema_title(ConversationSummary)


class SummaryOutputError(ValueError):
    """The model's summary did not match the ConversationSummary contract."""


class SummaryCall(BaseModel):
    """How the summary's model call is made within a run."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)  # the hold is a protocol

    options: CallOptions
    tools: Sequence[ToolSchema] = Field(default=(), description="The run's tools (offered with tool_choice none).")
    end_user: str | None = None
    before_send: BeforeSend | None = Field(default=None, description="The run's budget hold (gateway.hold).")


class ModelSummarizer:
    def __init__(
        self,
        llm: LLMClient,
        record: Callable[[NewMessage], None],
        *,
        run_id: str,
        call: SummaryCall,
        system: SystemMessage,
        task: str,
        user_turn: Callable[[str], str],
        reply_max_tokens: int,
        max_tokens: int,
        counter: TokenCounter,
        max_repairs: int,
    ) -> None:
        self._llm = llm
        self._record_row = record
        self._run_id = run_id
        self._call = call
        self._system = system
        self._task = task
        self._user_turn = user_turn
        self._reply_max_tokens = reply_max_tokens
        self._max_tokens = max_tokens
        self._counter = counter
        self._max_repairs = max_repairs

    async def summarize(self, request: SummaryRequest) -> str:
        # The run's system prompt is not stored with the conversation: the request gets it here, so the call
        # starts with the same prefix as the run's stages.
        request = request.model_copy(update={"system": request.system or self._system})
        conversation: list[ChatMessage] = summary_request_messages(request, self._task, self._user_turn)
        repairs = 0
        while True:
            call = self._request(conversation)
            if self._call.before_send is not None:
                call = await self._call.before_send(call)
            response = await self._llm.complete(call, on_unfinished=self._unfinished)
            if self._call.before_send is not None:
                self._call.before_send.ended(call, response.cost.cost)
            try:
                summary = ConversationSummary.model_validate_json(strip_code_fence(response.content)).summary.strip()
            except ValidationError as exc:
                self._record(
                    response, error=f"rejected: did not match the summary contract ({exc.error_count()} errors)"
                )
                if repairs == self._max_repairs:
                    raise SummaryOutputError(
                        f"the model's summary did not match the {_CONTRACT} contract after {repairs + 1} attempts"
                    ) from exc
                repairs += 1
                conversation = [
                    *conversation,
                    AssistantMessage(content=response.content, reasoning_content=response.reasoning),
                    UserMessage(content=_repair(exc, response)),
                ]
                continue
            self._record(response, error=None)
            return clip_to_tokens(summary, self._max_tokens, self._counter)

    def _request(self, conversation: list[ChatMessage]) -> LLMRequest:
        options = self._call.options
        tools = list(self._call.tools) or None
        return LLMRequest(
            model=options.model,
            messages=[WireMessage.model_validate(to_wire(m)) for m in conversation],
            tools=tools,
            tool_choice="none" if tools else None,
            json_mode=True,
            max_tokens=self._reply_max_tokens,
            thinking=options.thinking,
            reasoning_effort=options.reasoning_effort,
            end_user=self._call.end_user,
        )

    def _unfinished(self, call: UnfinishedCall) -> None:
        self._record_row(unfinished_call_row(call, stage=SUMMARY_STAGE, run_id=self._run_id))

    def _record(self, response: LLMResponse, *, error: str | None) -> None:
        cost = response.cost
        metadata = AuditMetadata(
            **BillingFields.of(cost).model_dump(),
            stage=SUMMARY_STAGE,
            run_id=self._run_id,
            model=response.model,
            raw_output=response.content,
            error=error,
        )
        row = NewMessage(
            role="assistant",
            content=response.content,
            metadata=metadata,
            input_tokens=cost.input_tokens,
            output_tokens=cost.output_tokens,
            cost=cost.cost,
        )
        self._record_row(row)


def _repair(error: ValidationError, response: LLMResponse) -> str:
    problem = unusable_answer(response.content, response.finish_reason, error)
    return repair_text(problem, ConversationSummary, where="in the task above")


def clip_to_tokens(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """`text`, shortened at a character boundary until its summary message (the framing included) fits
    `max_tokens`: the window reserves that much for it."""

    def tokens(candidate: str) -> int:
        return counter(summary_message(candidate, "clip"))

    if tokens(text) <= max_tokens:
        return text
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if tokens(text[:middle] + "…") <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return text[:low] + "…"
