"""Built-in tools a stage's agent can be granted in config/crewai/agents.yaml."""

from agent_runtime.engine.flow.tools.base import (
    OpenAIFunction,
    OpenAITool,
    Tool,
    ToolArgs,
    ToolError,
    ToolOutcome,
)
from agent_runtime.engine.flow.tools.calculator import CalculatorArgs, CalculatorTool, evaluate_expression
from agent_runtime.engine.flow.tools.current_time import CurrentTimeArgs, CurrentTimeTool
from agent_runtime.engine.flow.tools.registry import RunToolSet, ToolRegistry

BUILTIN_TOOLS = ToolRegistry([CurrentTimeTool(), CalculatorTool()])

__all__ = [
    "BUILTIN_TOOLS",
    "CalculatorArgs",
    "CalculatorTool",
    "CurrentTimeArgs",
    "CurrentTimeTool",
    "OpenAIFunction",
    "OpenAITool",
    "RunToolSet",
    "Tool",
    "ToolArgs",
    "ToolError",
    "ToolOutcome",
    "ToolRegistry",
    "evaluate_expression",
]
