"""Built-in tools a stage's agent can be granted in config/crewai/agents.yaml."""

from agent_runtime.engine.flow.tools.base import (
    Tool,
    ToolArgs,
    ToolError,
    ToolOutcome,
)
from agent_runtime.engine.flow.tools.calculator import CalculatorArgs, CalculatorTool, evaluate_expression
from agent_runtime.engine.flow.tools.current_time import CurrentTimeArgs, CurrentTimeTool
from agent_runtime.engine.flow.tools.profile_bio import BioWriter, UpdateBioArgs, UpdateBioTool
from agent_runtime.engine.flow.tools.registry import RunToolSet, ToolRegistry

BUILTIN_TOOLS = ToolRegistry([CurrentTimeTool(), CalculatorTool()])
# Tools that act on the user's data through the engine: built per engine (`engine_tools`), named here so the
# YAML can be validated before an engine exists.
ENGINE_TOOL_NAMES = ("update_bio",)
KNOWN_TOOL_NAMES = (*BUILTIN_TOOLS.names(), *ENGINE_TOOL_NAMES)


def engine_tools(bio_writer: BioWriter) -> ToolRegistry:
    """Every tool the YAML may grant, bound to the engine's services."""
    return ToolRegistry([CurrentTimeTool(), CalculatorTool(), UpdateBioTool(bio_writer)])


__all__ = [
    "BUILTIN_TOOLS",
    "ENGINE_TOOL_NAMES",
    "KNOWN_TOOL_NAMES",
    "BioWriter",
    "CalculatorArgs",
    "CalculatorTool",
    "CurrentTimeArgs",
    "CurrentTimeTool",
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
