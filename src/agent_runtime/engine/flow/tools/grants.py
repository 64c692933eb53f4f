"""The execution stage's tools as one run sees them from its start to its end.

A reload of `TOOLS_FILE` (engine/tools_reload.py) builds new grants for the runs that start after it; a run in
flight keeps the grants it started with, so its tools array (part of the cached prefix) never changes mid-run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_runtime.engine.flow.templates import FlowTemplates
from agent_runtime.engine.flow.tools.base import Tool
from agent_runtime.engine.flow.tools.registry import ToolRegistry
from agent_runtime.engine.llm.models import ToolSchema


@dataclass(frozen=True)
class ToolGrants:
    """The templates that grant the execution stage its tools (agents.yaml's, then `TOOLS_FILE`'s) and the
    registry that runs them."""

    templates: FlowTemplates
    registry: ToolRegistry
    by_name: dict[str, Tool[Any]] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {name: self.registry.get(name) for name in self.registry.names()})

    @property
    def granted(self) -> list[str]:
        return self.templates.execution.agent.tools

    @property
    def requiring_approval(self) -> list[str]:
        return self.templates.execution.agent.requires_approval

    def schemas(self) -> list[ToolSchema]:
        """The execution stage's server tools as the model is offered them (every call carries them: gateway)."""
        return [self.registry.get(name).openai_schema() for name in self.granted]
