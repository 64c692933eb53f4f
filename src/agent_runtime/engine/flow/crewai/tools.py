"""CrewAI's tool ecosystem in our stages: any `crewai.tools.BaseTool` as one of our `Tool`s.

The stage runs it like ours (engine/flow/stage_tools.py): offered with its own argument schema, its arguments
validated first, its result JSON for the model (`{"result": <the text CrewAI would give an agent>}`), a `ToolFailure`
it returns as a failed call, timeouts and metrics as for every tool. A tool that implements `_arun` is awaited on
the app's loop; one that implements only the synchronous `_run` (most of CrewAI's own toolkit: blocking HTTP
clients) runs on a worker thread, because it offers no async API: a timed-out or cut call leaves that thread to
finish on its own.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from agent_runtime.engine.flow.crewai.env import require_crewai_env
from agent_runtime.engine.flow.tools import Tool, ToolError
from agent_runtime.engine.flow.tools.base import DEFAULT_TOOL_TIMEOUT_SECONDS
from agent_runtime.engine.profiles.models import UserAgentContext

require_crewai_env()

from crewai.tools import BaseTool, ToolFailure  # noqa: E402
from crewai.utilities.string_utils import sanitize_tool_name  # noqa: E402


class CrewAIToolResult(BaseModel):
    result: str


class CrewAITool(Tool[BaseModel]):
    """`tool` under the name CrewAI would give it in a function call (letters, digits and underscores)."""

    def __init__(
        self, tool: BaseTool, *, timeout_seconds: float = DEFAULT_TOOL_TIMEOUT_SECONDS, cancellable: bool = True
    ) -> None:
        super().__init__(
            name=sanitize_tool_name(tool.name),
            description=tool.description,
            args_model=tool.args_schema,
            timeout_seconds=timeout_seconds,
            cancellable=cancellable,
        )
        self._tool = tool

    async def execute(self, args: BaseModel, ctx: UserAgentContext) -> BaseModel:
        kwargs: dict[str, Any] = args.model_dump()
        if type(self._tool)._arun is not BaseTool._arun:
            raw = await self._tool.arun(**kwargs)
        else:
            # The tool has no async API (see the module docstring).
            raw = await asyncio.to_thread(self._tool.run, **kwargs)
        if isinstance(raw, ToolFailure):
            raise ToolError(raw.as_agent_message())
        return CrewAIToolResult(result=self._tool.format_output_for_agent(raw))


__all__ = ["CrewAITool", "CrewAIToolResult"]
