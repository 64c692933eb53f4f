"""The tool contract: a typed args model the LLM sees as an OpenAI function, and a run that never raises."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from agent_runtime.engine.llm.models import FunctionSpec, ToolSchema
from agent_runtime.engine.profiles.models import UserAgentContext
from agent_runtime.observability import metrics
from agent_runtime.observability.tracing import mark_failed, tool_span

logger = logging.getLogger(__name__)

ArgsT = TypeVar("ArgsT", bound=BaseModel)

DEFAULT_TOOL_TIMEOUT_SECONDS = 5.0


class ToolArgs(BaseModel):
    # Unknown arguments are an error rather than ignored: the model must learn that, say, current_time
    # takes no timezone argument instead of believing it asked for one.
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolOutcome(BaseModel):
    """What goes back to the model as the tool message; `content` is always JSON text."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    content: str
    error: str | None = None
    # The run was stopped while the tool ran, and the tool was cut (engine/flow/stage_tools.py).
    cancelled: bool = False

    @model_validator(mode="after")
    def _error_iff_failed(self) -> ToolOutcome:
        if self.ok == (self.error is not None):
            raise ValueError("error must be set exactly when ok is false")
        return self

    @classmethod
    def failure(cls, error: str) -> ToolOutcome:
        return cls(ok=False, content=json.dumps({"error": error}, ensure_ascii=False), error=error)

    @classmethod
    def cancelled_call(cls) -> ToolOutcome:
        error = "cancelled: the run was stopped before the tool finished"
        return cls(ok=False, content=json.dumps({"error": error}), error=error, cancelled=True)


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in err["loc"])
        parts.append(f"{loc}: {err['msg']}" if loc else str(err["msg"]))
    return "invalid arguments: " + "; ".join(parts)


class Tool(ABC, Generic[ArgsT]):
    def __init__(
        self,
        *,
        name: str,
        description: str,
        args_model: type[ArgsT],
        timeout_seconds: float = DEFAULT_TOOL_TIMEOUT_SECONDS,
        cancellable: bool = True,
        idempotent: bool = False,
    ) -> None:
        """`cancellable`: a run stopped while the tool runs may cut it (its coroutine is cancelled); False for a
        tool whose effect must not be left half done: it finishes first, within `timeout_seconds`. `idempotent`:
        running it twice with the same arguments does what running it once does, so a run taken over by another
        process runs it again when its result was not stored (else the model is told its outcome is unknown)."""
        self.name = name
        self.description = description
        self.args_model = args_model
        self.timeout_seconds = timeout_seconds
        self.cancellable = cancellable
        self.idempotent = idempotent

    @functools.cached_property
    def _schema(self) -> ToolSchema:
        # Generated once: pydantic's schema generation cost ~0.5 ms per tool, on every run.
        spec = FunctionSpec(
            name=self.name, description=self.description, parameters=self.args_model.model_json_schema()
        )
        return ToolSchema(function=spec)

    def openai_schema(self) -> ToolSchema:
        """The tool as the model is offered it (the same bytes on every call: the provider caches prompt prefixes)."""
        return self._schema

    @abstractmethod
    async def execute(self, args: ArgsT, ctx: UserAgentContext) -> BaseModel:
        """Do the work; raise ToolError for an expected failure the model should see."""

    async def run(self, args_json: str, ctx: UserAgentContext) -> ToolOutcome:
        """Run the tool as one span and one metrics sample; the outcome is what the model sees."""
        started = time.perf_counter()
        with tool_span(self.name) as span:
            result = await self._run(args_json, ctx)
            if result.outcome != "ok":
                mark_failed(span, result.outcome)
        metrics.tool_call(self.name, result.outcome, time.perf_counter() - started)
        return result.value

    async def _run(self, args_json: str, ctx: UserAgentContext) -> _Result:
        # Models often send an empty string instead of "{}" for a function without parameters.
        try:
            args = self.args_model.model_validate_json(args_json if args_json.strip() else "{}")
        except ValidationError as exc:
            return _Result("invalid_arguments", ToolOutcome.failure(_validation_message(exc)))
        try:
            result = await asyncio.wait_for(self.execute(args, ctx), timeout=self.timeout_seconds)
        except ToolError as exc:
            return _Result("error", ToolOutcome.failure(str(exc)))
        except TimeoutError:
            return _Result("timeout", ToolOutcome.failure(f"{self.name} timed out after {self.timeout_seconds:g} s"))
        except Exception:
            # A bug in a tool must not end the run; the model is told the tool failed and can carry on.
            logger.exception("tool %s failed", self.name)
            return _Result("internal_error", ToolOutcome.failure(f"{self.name} failed with an internal error"))
        return _Result("ok", ToolOutcome(ok=True, content=result.model_dump_json()))


@dataclass(frozen=True, slots=True)
class _Result:
    """A tool call's outcome for the metrics (a bounded label) and what the model gets."""

    outcome: Literal["ok", "invalid_arguments", "error", "timeout", "internal_error"]
    value: ToolOutcome


class ToolError(Exception):
    """An expected tool failure whose message is safe and useful to show the model."""
