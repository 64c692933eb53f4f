"""Summaries from the configured model, for the run path: one call per cut, recorded like every model call.

The call is the summary task (`memory_summary` in config/crewai/tasks.yaml) in JSON mode, capped at the task's
`max_tokens`, after the turns it condenses (`summary.summary_request_messages`). Its tokens and cost go on an
audit row (seq < 0, stage `memory_summary`, the run's id) handed to `record` (the run writes it with its end,
in the same statement as its other rows, so the run's and the session's usage include it); an answer that does
not match the contract is recorded too (with its error) and raises, so the cut is retried at the next turn.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError

from agent_runtime.engine.llm.client import LLMClient
from agent_runtime.engine.llm.models import LLMRequest, LLMResponse, WireMessage
from agent_runtime.engine.memory.convert import to_wire
from agent_runtime.engine.memory.messages import SystemMessage
from agent_runtime.engine.memory.summary import (
    ConversationSummary,
    SummaryRequest,
    summary_message,
    summary_request_messages,
)
from agent_runtime.engine.memory.tokens import TokenCounter
from agent_runtime.engine.messages.metadata import AuditMetadata
from agent_runtime.engine.messages.models import NewMessage

SUMMARY_STAGE = "memory_summary"


class SummaryOutputError(ValueError):
    """The model's summary did not match the ConversationSummary contract."""


class ModelSummarizer:
    def __init__(
        self,
        llm: LLMClient,
        record: Callable[[NewMessage], None],
        *,
        run_id: str,
        model: str,
        system: SystemMessage,
        task: str,
        reply_max_tokens: int,
        max_tokens: int,
        counter: TokenCounter,
    ) -> None:
        self._llm = llm
        self._record_row = record
        self._run_id = run_id
        self._model = model
        self._system = system
        self._task = task
        self._reply_max_tokens = reply_max_tokens
        self._max_tokens = max_tokens
        self._counter = counter

    async def summarize(self, request: SummaryRequest) -> str:
        # The run's system prompt is not stored with the conversation: the request gets it here, so the call
        # starts with the same prefix as the run's stages.
        request = request.model_copy(update={"system": request.system or self._system})
        messages = [WireMessage.model_validate(to_wire(m)) for m in summary_request_messages(request, self._task)]
        call = LLMRequest(model=self._model, messages=messages, json_mode=True, max_tokens=self._reply_max_tokens)
        response = await self._llm.complete(call)
        try:
            summary = ConversationSummary.model_validate_json(_json_text(response.content)).summary.strip()
        except ValidationError as exc:
            self._record(response, error=f"rejected: did not match the summary contract ({exc.error_count()} errors)")
            raise SummaryOutputError("the model's summary did not match the ConversationSummary contract") from exc
        self._record(response, error=None)
        return clip_to_tokens(summary, self._max_tokens, self._counter)

    def _record(self, response: LLMResponse, *, error: str | None) -> None:
        cost = response.cost
        metadata = AuditMetadata(
            stage=SUMMARY_STAGE,
            run_id=self._run_id,
            model=response.model,
            cost_source=cost.cost_source,
            cached_tokens=cost.cache_hit_tokens,
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


def _json_text(content: str) -> str:
    text = content.strip()
    if text.startswith("```") and text.endswith("```"):
        text = text[3:-3].removeprefix("json")
    return text.strip()


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
