"""The tools YAML may grant to a stage, and the per-run tool set bound to one user's context."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent_runtime.engine.flow.tools.base import Tool, ToolOutcome
from agent_runtime.engine.flow.tools.call_identity import tool_call
from agent_runtime.engine.llm.models import ToolSchema
from agent_runtime.engine.profiles.models import UserAgentContext
from agent_runtime.observability import metrics

AnyTool = Tool[Any]


class RunToolSet:
    """The tools of one stage of one run; the user's context is bound here, not supplied by the model."""

    def __init__(self, tools: list[AnyTool], ctx: UserAgentContext) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._ctx = ctx

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[ToolSchema]:
        """The tools as the model is offered them, in the stage's order."""
        return [tool.openai_schema() for tool in self._tools.values()]

    def cancellable(self, name: str) -> bool:
        """Whether a stopped run may cut the tool while it runs (an unknown name: nothing runs, nothing to cut)."""
        tool = self._tools.get(name)
        return tool is None or tool.cancellable

    async def run(self, name: str, args_json: str, *, call_id: str | None = None) -> ToolOutcome:
        """`call_id`: the model's id of the call, which with the run's id keys it (call_identity.py)."""
        tool = self._tools.get(name)
        if tool is None:
            # The model asked for a tool it was not given: tell it, so it can recover, instead of failing the run.
            # Its name is the model's invention, so the metric does not take it as a label.
            metrics.tool_call(metrics.UNKNOWN, "unknown_tool", 0.0)
            return ToolOutcome.failure(f"unknown tool {name!r}; available: {', '.join(self._tools) or 'none'}")
        run_id = self._ctx.run_id
        key = f"{run_id}:{call_id}" if run_id is not None and call_id is not None else None
        with tool_call(key):
            return await tool.run(args_json, self._ctx)


class ToolRegistry:
    def __init__(self, tools: Iterable[AnyTool]) -> None:
        self._tools: dict[str, AnyTool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"duplicate tool name {tool.name!r}")
            self._tools[tool.name] = tool

    def get(self, name: str) -> AnyTool:
        try:
            return self._tools[name]
        except KeyError:
            raise KeyError(f"unknown tool {name!r}") from None

    def names(self) -> list[str]:
        return list(self._tools)

    def build_for_run(self, names: Iterable[str], ctx: UserAgentContext) -> RunToolSet:
        return RunToolSet([self.get(name) for name in names], ctx)
