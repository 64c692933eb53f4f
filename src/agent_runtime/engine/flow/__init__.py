"""The agent flow: stage contracts, YAML templates, prompt building and tools (the CrewAI Flow lives in
its own module so that importing these does not import CrewAI)."""

from agent_runtime.engine.flow.contracts import (
    STAGE_CONTRACTS,
    STAGE_NAMES,
    ExecutionResult,
    IntentResult,
    OrganizationResult,
    StageName,
)
from agent_runtime.engine.flow.prompt import (
    AgentKwargs,
    StagePromptPayload,
    build_global_system_prompt,
    build_stage_prompt_payload,
)
from agent_runtime.engine.flow.template_files import load_flow_templates
from agent_runtime.engine.flow.templates import (
    ExecutionVariables,
    FlowTemplates,
    IntentVariables,
    OrganizationVariables,
    StageVariables,
    TemplateConfigError,
)
from agent_runtime.engine.flow.tools import BUILTIN_TOOLS, ToolOutcome, ToolRegistry

__all__ = [
    "BUILTIN_TOOLS",
    "STAGE_CONTRACTS",
    "STAGE_NAMES",
    "AgentKwargs",
    "ExecutionResult",
    "ExecutionVariables",
    "FlowTemplates",
    "IntentResult",
    "IntentVariables",
    "OrganizationResult",
    "OrganizationVariables",
    "StageName",
    "StagePromptPayload",
    "StageVariables",
    "TemplateConfigError",
    "ToolOutcome",
    "ToolRegistry",
    "build_global_system_prompt",
    "build_stage_prompt_payload",
    "load_flow_templates",
]
