"""Reading config/crewai/{agents,tasks}.yaml into FlowTemplates, and checking them (engine/flow/templates.py says
what they hold): every error names the file and the key, and stops start-up."""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from agent_runtime.engine.flow.contracts import STAGE_NAMES, StageName
from agent_runtime.engine.flow.templates import (
    AGENTS_FILE,
    STAGE_VARIABLES,
    TASKS_FILE,
    TOOL_STAGES,
    AgentTemplate,
    FlowTemplates,
    StageTaskTemplate,
    StageTemplates,
    TaskTemplate,
    TemplateConfigError,
)
from agent_runtime.engine.flow.tools import KNOWN_TOOL_NAMES

_FileModel = TypeVar("_FileModel", "_AgentsFile", "_TasksFile")


class _AgentsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    intent: AgentTemplate
    execution: AgentTemplate
    organization: AgentTemplate


class _TasksFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    intent: StageTaskTemplate
    execution: StageTaskTemplate
    organization: StageTaskTemplate
    memory_summary: TaskTemplate
    memory_extraction: TaskTemplate


def _placeholders(file: Path, key: str, template: str, allowed: frozenset[str]) -> frozenset[str]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        message = f"{file}: {key}: malformed template ({exc}); write literal braces as {{{{ and }}}}"
        raise TemplateConfigError(message) from None
    found: set[str] = set()
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        if name not in allowed:
            raise TemplateConfigError(f"{file}: {key}: unknown placeholder {shown}")
        if spec or conversion:
            raise TemplateConfigError(f"{file}: {key}: placeholder {shown} must not have a conversion or a format spec")
        found.add(name)
    return frozenset(found)


def _load_yaml(file: Path) -> object:
    try:
        return yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TemplateConfigError(f"{file}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise TemplateConfigError(f"{file}: invalid YAML: {exc}") from None


def _parse(file: Path, model: type[_FileModel]) -> _FileModel:
    data = _load_yaml(file)
    if not isinstance(data, dict):
        raise TemplateConfigError(f"{file}: expected a mapping from stage name to template, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            key = ".".join(str(part) for part in err["loc"])
            problems.append(f"{file}: {key}: {err['msg']}" if key else f"{file}: {err['msg']}")
        raise TemplateConfigError("; ".join(problems)) from None


def _check_agent(file: Path, stage: StageName, agent: AgentTemplate, known: tuple[str, ...]) -> None:
    for field, text in {"role": agent.role, "goal": agent.goal, "backstory": agent.backstory}.items():
        _placeholders(file, f"{stage}.{field}", text, frozenset())
    if agent.tools and stage not in TOOL_STAGES:
        allowed = ", ".join(sorted(TOOL_STAGES))
        raise TemplateConfigError(f"{file}: {stage}.tools: tools can only be granted to the stages: {allowed}")
    for index, tool in enumerate(agent.tools):
        if tool not in known:
            raise TemplateConfigError(
                f"{file}: {stage}.tools[{index}]: unknown tool {tool!r} (known: {', '.join(known)})"
            )
        if tool in agent.tools[:index]:
            raise TemplateConfigError(f"{file}: {stage}.tools[{index}]: duplicate tool {tool!r}")


def _check_task(file: Path, stage: StageName, task: StageTaskTemplate) -> None:
    static = frozenset({"output_schema"})
    _require(
        file, f"{stage}.description", static, _placeholders(file, f"{stage}.description", task.description, static)
    )
    _placeholders(file, f"{stage}.expected_output", task.expected_output, static)
    if stage == "intent":
        if task.request is not None:
            raise TemplateConfigError(
                f"{file}: intent.request: the intent stage takes no request: the user's turn is its last message"
            )
        return
    if task.request is None:
        raise TemplateConfigError(f"{file}: {stage}.request: Field required")
    variables = STAGE_VARIABLES[stage]
    used = _placeholders(file, f"{stage}.request", task.request, variables.placeholders())
    _require(file, f"{stage}.request", variables.required, used)


def _require(file: Path, key: str, required: frozenset[str], used: frozenset[str]) -> None:
    missing = sorted(required - used)
    if missing:
        shown = ", ".join("{" + name + "}" for name in missing)
        raise TemplateConfigError(f"{file}: {key}: missing required placeholder {shown}")


def load_flow_templates(config_dir: Path, extra_tools: Sequence[str] = ()) -> FlowTemplates:
    """Load and validate both YAML files; raise TemplateConfigError so a bad config stops start-up. `extra_tools`:
    the names of the tools registered beside the built-in ones (`create_app(tools=...)`), which the YAML may grant."""
    agents_file, tasks_file = config_dir / AGENTS_FILE, config_dir / TASKS_FILE
    agents = _parse(agents_file, _AgentsFile)
    tasks = _parse(tasks_file, _TasksFile)
    templates = FlowTemplates(
        intent=StageTemplates(agent=agents.intent, task=tasks.intent),
        execution=StageTemplates(agent=agents.execution, task=tasks.execution),
        organization=StageTemplates(agent=agents.organization, task=tasks.organization),
        memory_summary=tasks.memory_summary,
        memory_extraction=tasks.memory_extraction,
    )
    for stage in STAGE_NAMES:
        _check_agent(agents_file, stage, templates.stage(stage).agent, (*KNOWN_TOOL_NAMES, *extra_tools))
        _check_task(tasks_file, stage, templates.stage(stage).task)
    _check_summary_task(tasks_file, tasks.memory_summary)
    _check_extraction_task(tasks_file, tasks.memory_extraction)
    return templates


def _check_summary_task(file: Path, task: TaskTemplate) -> None:
    allowed = frozenset({"max_words", "output_schema"})
    used = _placeholders(file, "memory_summary.description", task.description, allowed)
    _placeholders(file, "memory_summary.expected_output", task.expected_output, frozenset())
    _require(file, "memory_summary.description", allowed, used)


def _check_extraction_task(file: Path, task: TaskTemplate) -> None:
    allowed = frozenset({"max_chars", "output_schema"})
    used = _placeholders(file, "memory_extraction.description", task.description, allowed)
    _placeholders(file, "memory_extraction.expected_output", task.expected_output, frozenset())
    _require(file, "memory_extraction.description", allowed, used)
