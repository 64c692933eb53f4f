"""Built-in tools a stage's agent can be granted in config/crewai/agents.yaml."""

from collections.abc import Sequence
from typing import Any

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.flow.tools.base import (
    Tool,
    ToolArgs,
    ToolError,
    ToolOutcome,
)
from agent_runtime.engine.flow.tools.calculator import CalculatorArgs, CalculatorTool, evaluate_expression
from agent_runtime.engine.flow.tools.current_time import CurrentTimeArgs, CurrentTimeTool
from agent_runtime.engine.flow.tools.forget_memory import ForgetMemoryTool, MemoryForgetter
from agent_runtime.engine.flow.tools.profile_bio import BioWriter, UpdateBioArgs, UpdateBioTool
from agent_runtime.engine.flow.tools.registry import RunToolSet, ToolRegistry

BUILTIN_TOOLS = ToolRegistry([CurrentTimeTool(), CalculatorTool()])
# Tools that act on the user's data through the engine: built per engine (`engine_tools`), named here so the
# YAML can be validated before an engine exists.
ENGINE_TOOL_NAMES = ("update_bio", "forget_memory")
KNOWN_TOOL_NAMES = (*BUILTIN_TOOLS.names(), *ENGINE_TOOL_NAMES)


class _NoMemories:
    async def forget(self, ctx: RequestContext, what: str) -> list[str]:
        return []


def engine_tools(
    bio_writer: BioWriter, forgetter: MemoryForgetter | None = None, extra: Sequence[Tool[Any]] = ()
) -> ToolRegistry:
    """Every tool the YAML may grant, bound to the engine's services, and the `extra` ones registered beside them
    (`create_app(tools=...)`, e.g. CrewAI tools: engine/flow/crewai/tools.py)."""
    forget = ForgetMemoryTool(forgetter or _NoMemories())
    return ToolRegistry([CurrentTimeTool(), CalculatorTool(), UpdateBioTool(bio_writer), forget, *extra])


__all__ = [
    "BUILTIN_TOOLS",
    "ENGINE_TOOL_NAMES",
    "KNOWN_TOOL_NAMES",
    "BioWriter",
    "CalculatorArgs",
    "CalculatorTool",
    "CurrentTimeArgs",
    "CurrentTimeTool",
    "ForgetMemoryTool",
    "MemoryForgetter",
    "RunToolSet",
    "Tool",
    "ToolArgs",
    "ToolError",
    "ToolOutcome",
    "ToolRegistry",
    "UpdateBioArgs",
    "UpdateBioTool",
    "engine_tools",
    "evaluate_expression",
]
