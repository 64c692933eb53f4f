"""What a model call cut after the provider began to answer is billed: DeepSeek bills what it processed, and no
usage came back, so the prompt is counted here and the output as far as it streamed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from agent_runtime.engine.billing.cost import CostCalculator
from agent_runtime.engine.billing.models import LLMUsage
from agent_runtime.engine.llm.call_builder import CallTarget
from agent_runtime.engine.llm.errors import (
    LLMInvalidResponseError,
    LLMStreamInterruptedError,
    LLMTimeoutError,
    map_exception,
)
from agent_runtime.engine.llm.litellm_import import load_litellm
from agent_runtime.engine.llm.models import UnfinishedCall

logger = logging.getLogger(__name__)

OnUnfinished = Callable[[UnfinishedCall], None]
"""Takes the estimate of a call the provider bills although it gave no usage (cut by a cancel or a fault)."""

_BILLED_WHEN_CUT = (LLMStreamInterruptedError, LLMTimeoutError, LLMInvalidResponseError)


def report_unfinished(
    report: OnUnfinished | None,
    exc: BaseException,
    target: CallTarget,
    kwargs: dict[str, Any],
    output: str,
    *,
    at: datetime,
    costs: CostCalculator,
    secrets: Iterable[str],
) -> None:
    """Report what the attempt that `exc` cut is billed, estimated; nothing for a refusal (an HTTP error status:
    not billed) or for the demo model."""
    if report is None or target.is_demo:
        return
    cancelled = isinstance(exc, asyncio.CancelledError)
    mapped = None if cancelled or not isinstance(exc, Exception) else map_exception(exc, secrets=secrets)
    if not cancelled and not isinstance(mapped, _BILLED_WHEN_CUT):
        return
    litellm = load_litellm()
    try:
        # The tools array is part of the prompt the provider bills (rendered into its system turn).
        prompt = int(litellm.token_counter(model=target.model, messages=kwargs["messages"], tools=kwargs.get("tools")))
        completion = int(litellm.token_counter(model=target.model, text=output)) if output else 0
    except Exception:
        logger.exception("could not count the tokens of an interrupted model call: model=%s", target.model)
        return
    usage = LLMUsage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
    reason = "cancelled" if mapped is None else mapped.code
    report(UnfinishedCall(model=target.model, reason=reason, cost=costs.cost(target.model, usage, at=at)))
