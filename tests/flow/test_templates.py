from __future__ import annotations

import json
import shutil
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_runtime.engine.flow.contracts import ExecutionResult, OrganizationResult
from agent_runtime.engine.flow.template_files import load_flow_templates
from agent_runtime.engine.flow.templates import (
    ExecutionVariables,
    IntentVariables,
    OrganizationVariables,
    TemplateConfigError,
    output_schema,
    render_template,
)
from agent_runtime.engine.runtime import load_config
from agent_runtime.resources import default_config_dir
from agent_runtime.settings import Settings

CONFIG_DIR = default_config_dir() / "crewai"
HOSTILE = "{user_input} {0} {__class__} {output_schema} {{x}} }{"


def _placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def _real(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CONFIG_DIR / name).read_text(encoding="utf-8"))
    return data


Edit = Callable[[dict[str, Any], dict[str, Any]], None]


def _load_edited(tmp_path: Path, edit: Edit) -> str:
    """Copy the real config, apply `edit(agents, tasks)`, load it, and return the error message."""
    agents, tasks = _real("agents.yaml"), _real("tasks.yaml")
    edit(agents, tasks)
    (tmp_path / "agents.yaml").write_text(yaml.safe_dump(agents, allow_unicode=True), encoding="utf-8")
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump(tasks, allow_unicode=True), encoding="utf-8")
    with pytest.raises(TemplateConfigError) as info:
        load_flow_templates(tmp_path)
    return str(info.value)


def test_real_config_loads_with_documented_placeholders_and_tools() -> None:
    templates = load_flow_templates(CONFIG_DIR)
    assert {stage: templates.stage(stage).agent.tools for stage in ("intent", "execution", "organization")} == {
        "intent": [],
        "execution": ["current_time", "calculator", "update_bio", "forget_memory"],
        "organization": [],
    }
    assert templates.execution.agent.requires_approval == ["update_bio", "forget_memory"]
    # The static texts (in the system prompt) take only the schema; the per-call request takes the values.
    for stage in ("intent", "execution", "organization"):
        task = templates.stage(stage).task
        assert _placeholders(task.description) == {"output_schema"}
        assert _placeholders(task.expected_output) == set()
    # The intent stage has no request (the user's turn is its last message); the others repeat no values: they
    # come right after the answer that holds them.
    assert templates.intent.task.request is None
    assert templates.execution.task.request == "Carry out the execution_brief of your intent answer above.\n"
    assert templates.organization.task.request == "Write the reply to the user from your execution report above.\n"
    # Each task's model choice is written down: the service's model, thinking off (tasks.yaml says why).
    assert {name: (task.model, task.thinking, task.reasoning_effort) for name, task in templates.tasks().items()} == {
        name: (None, "disabled", None)
        for name in ("intent", "execution", "organization", "memory_summary", "memory_extraction")
    }
    # Every model call has an output cap: each stage's, and the memory summary's.
    assert {stage: templates.stage(stage).task.max_tokens for stage in ("intent", "execution", "organization")} == {
        "intent": 2048,
        "execution": 1024,
        "organization": 2048,
    }
    assert templates.summary_max_tokens == templates.memory_summary.max_tokens == 1024
    for stage in ("intent", "execution", "organization"):
        assert "ONLY a JSON object" in templates.stage(stage).task.description
        agent = templates.stage(stage).agent
        assert _placeholders(agent.role + agent.goal + agent.backstory) == set()


def test_edited_copy_of_real_config_loads(tmp_path: Path) -> None:
    agents, tasks = _real("agents.yaml"), _real("tasks.yaml")
    agents["intent"]["backstory"] = "Literal braces: {{not a placeholder}}."
    (tmp_path / "agents.yaml").write_text(yaml.safe_dump(agents), encoding="utf-8")
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump(tasks), encoding="utf-8")
    assert load_flow_templates(tmp_path).intent.agent.backstory == "Literal braces: {{not a placeholder}}."


def _del(path: str) -> Edit:
    file, stage, *rest = path.split(".")

    def edit(agents: dict[str, Any], tasks: dict[str, Any]) -> None:
        target = (agents if file == "agents" else tasks)[stage]
        if rest:
            del target[rest[0]]
        else:
            del (agents if file == "agents" else tasks)[stage]

    return edit


def _set(file: str, stage: str, key: str, value: Any) -> Edit:
    def edit(agents: dict[str, Any], tasks: dict[str, Any]) -> None:
        (agents if file == "agents" else tasks).setdefault(stage, {})[key] = value

    return edit


def _description_with(extra: str, stage: str = "execution", key: str = "description") -> Edit:
    def edit(agents: dict[str, Any], tasks: dict[str, Any]) -> None:
        tasks[stage][key] += extra

    return edit


@pytest.mark.parametrize(
    ("edit", "file", "message"),
    [
        (_del("tasks.organization"), "tasks.yaml", "organization: Field required"),
        (_del("agents.execution.goal"), "agents.yaml", "execution.goal: Field required"),
        (_del("tasks.intent.expected_output"), "tasks.yaml", "intent.expected_output: Field required"),
        (_del("tasks.execution.max_tokens"), "tasks.yaml", "execution.max_tokens: Field required"),
        (_del("tasks.memory_summary.max_tokens"), "tasks.yaml", "memory_summary.max_tokens: Field required"),
        (
            _set("tasks", "organization", "max_tokens", 0),
            "tasks.yaml",
            "organization.max_tokens: Input should be greater than or equal to 1",
        ),
        (
            _set("tasks", "intent", "max_tokens", "lots"),
            "tasks.yaml",
            "intent.max_tokens: Input should be a valid integer, unable to parse string as an integer",
        ),
        (_set("agents", "intent", "llm", "gpt"), "agents.yaml", "intent.llm: Extra inputs are not permitted"),
        (_set("tasks", "planning", "description", "x"), "tasks.yaml", "planning: Extra inputs are not permitted"),
        (_set("agents", "intent", "role", 123), "agents.yaml", "intent.role: Input should be a valid string"),
        (_set("agents", "intent", "role", ""), "agents.yaml", "intent.role: String should have at least 1 character"),
        (_description_with(" {foo}"), "tasks.yaml", "execution.description: unknown placeholder {foo}"),
        (
            _description_with(" {execution_report}", "intent"),
            "tasks.yaml",
            "intent.description: unknown placeholder {execution_report}",
        ),
        (_description_with(" {}"), "tasks.yaml", "execution.description: unknown placeholder {}"),
        (_description_with(" {0}"), "tasks.yaml", "execution.description: unknown placeholder {0}"),
        (
            _description_with(" {user_input.__class__}"),
            "tasks.yaml",
            "execution.description: unknown placeholder {user_input.__class__}",
        ),
        (
            _description_with(" {user_input[0]}"),
            "tasks.yaml",
            "execution.description: unknown placeholder {user_input[0]}",
        ),
        (
            _description_with(" {user_input:>999999999}", key="request"),
            "tasks.yaml",
            "execution.request: placeholder {user_input:>999999999} must not have a conversion or a format spec",
        ),
        (
            _description_with(" {user_input!r}", key="request"),
            "tasks.yaml",
            "execution.request: placeholder {user_input!r} must not have a conversion or a format spec",
        ),
        (
            _description_with(" {user_input}"),
            "tasks.yaml",
            "execution.description: unknown placeholder {user_input}",
        ),
        (
            _description_with(" {output_schema}", key="request"),
            "tasks.yaml",
            "execution.request: unknown placeholder {output_schema}",
        ),
        (_del("tasks.execution.request"), "tasks.yaml", "execution.request: Field required"),
        (
            _set("tasks", "intent", "request", "{user_input}"),
            "tasks.yaml",
            "intent.request: the intent stage takes no request: the user's turn is its last message",
        ),
        (
            _set("tasks", "intent", "thinking", "sometimes"),
            "tasks.yaml",
            "intent.thinking: Input should be 'enabled' or 'disabled'",
        ),
        (_del("tasks.memory_summary.thinking"), "tasks.yaml", "memory_summary.thinking: Field required"),
        (
            _set("tasks", "execution", "reasoning_effort", "max"),
            "tasks.yaml",
            "execution: Value error, reasoning_effort needs thinking: enabled",
        ),
        (
            _set("tasks", "organization", "expected_output", "JSON {"),
            "tasks.yaml",
            "organization.expected_output: malformed template (Single '{' encountered in format string); "
            "write literal braces as {{ and }}",
        ),
        (
            _set("tasks", "execution", "description", "Do the brief."),
            "tasks.yaml",
            "execution.description: missing required placeholder {output_schema}",
        ),
        (
            _set("tasks", "organization", "request", "{user_input} {output_schema}"),
            "tasks.yaml",
            "organization.request: unknown placeholder {output_schema}",
        ),
        (
            _set("agents", "intent", "goal", "Help {user_input}"),
            "agents.yaml",
            "intent.goal: unknown placeholder {user_input}",
        ),
        (
            _set("agents", "execution", "tools", ["current_time", "shell"]),
            "agents.yaml",
            "execution.tools[1]: unknown tool 'shell' (known: current_time, calculator, update_bio, forget_memory)",
        ),
        (
            _set("agents", "execution", "tools", ["calculator", "calculator"]),
            "agents.yaml",
            "execution.tools[1]: duplicate tool 'calculator'",
        ),
        (
            _set("agents", "intent", "tools", ["calculator"]),
            "agents.yaml",
            "intent.tools: tools can only be granted to the stages: execution",
        ),
        (
            _set("agents", "execution", "tools", [{"name": "update_bio", "requires_approval": "sometimes"}]),
            "agents.yaml",
            "execution: Value error, tools.0.requires_approval: Input should be a valid boolean, "
            "unable to interpret input",
        ),
        (
            _set("agents", "execution", "tools", [{"name": "update_bio", "approve": True}]),
            "agents.yaml",
            "execution: Value error, tools.0.approve: Extra inputs are not permitted",
        ),
    ],
)
def test_config_error_names_file_and_key(tmp_path: Path, edit: Edit, file: str, message: str) -> None:
    assert _load_edited(tmp_path, edit) == f"{tmp_path / file}: {message}"


def test_invalid_yaml_names_the_file_and_position(tmp_path: Path) -> None:
    (tmp_path / "agents.yaml").write_text("intent: [unclosed\n", encoding="utf-8")
    (tmp_path / "tasks.yaml").write_text((CONFIG_DIR / "tasks.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ValueError, match="line 2, column 1") as info:
        load_flow_templates(tmp_path)
    assert isinstance(info.value, TemplateConfigError)
    assert str(info.value).startswith(f"{tmp_path / 'agents.yaml'}: invalid YAML: while parsing a flow sequence")


@pytest.mark.parametrize(("content", "kind"), [("", "NoneType"), ("- intent\n", "list")])
def test_file_that_is_not_a_mapping_is_rejected(tmp_path: Path, content: str, kind: str) -> None:
    (tmp_path / "agents.yaml").write_text(content, encoding="utf-8")
    with pytest.raises(TemplateConfigError) as info:
        load_flow_templates(tmp_path)
    assert str(info.value) == f"{tmp_path / 'agents.yaml'}: expected a mapping from stage name to template, got {kind}"


def test_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(TemplateConfigError) as info:
        load_flow_templates(tmp_path)
    assert str(info.value) == f"{tmp_path / 'agents.yaml'}: cannot read: No such file or directory"


def test_hostile_braces_in_user_input_are_inserted_verbatim() -> None:
    template = "Brief: {execution_brief}; the user said {user_input}"
    variables = ExecutionVariables(user_input=HOSTILE, ai_language="en-US", intent_summary="s", execution_brief="b")
    rendered = render_template(template, variables.template_values())
    # Independent oracle: plain substring replacement, user_input last so its braces are never looked at.
    expected = template.replace("{execution_brief}", '"b"').replace("{user_input}", json.dumps(HOSTILE))
    assert rendered == expected
    assert rendered.count(json.dumps(HOSTILE)) == 1


def test_template_values_are_json_text_for_every_stage() -> None:
    report = ExecutionResult(status="SUCCESS", execution_summary="ok", report_brief="say 4", execution_data={"r": 4})
    intent_values = IntentVariables(user_input='say "hi"\n', ai_language="zh-CN").template_values()
    execution_values = ExecutionVariables(
        user_input="2+2?", ai_language="zh-CN", intent_summary="sum", execution_brief="add {2} and 2"
    ).template_values()
    organization_values = OrganizationVariables(
        user_input="2+2?", ai_language="zh-CN", intent_summary="sum", execution_report=report
    ).template_values()
    assert intent_values == {
        "user_input": '"say \\"hi\\"\\n"',
        "ai_language": '"zh-CN"',
    }
    assert execution_values == {
        "user_input": '"2+2?"',
        "ai_language": '"zh-CN"',
        "intent_summary": '"sum"',
        "execution_brief": '"add {2} and 2"',
    }
    assert json.loads(organization_values["execution_report"]) == report.model_dump(mode="json")
    assert json.loads(output_schema("organization")) == OrganizationResult.model_json_schema()
    assert json.loads(output_schema("execution"))["title"] == "ExecutionResult"


def test_a_summary_cap_below_the_summary_size_stops_start_up(tmp_path: Path) -> None:
    shutil.copytree(CONFIG_DIR.parent, tmp_path, dirs_exist_ok=True)
    tasks = _real("tasks.yaml")
    tasks["memory_summary"]["max_tokens"] = 300
    (tmp_path / "crewai" / "tasks.yaml").write_text(yaml.safe_dump(tasks, allow_unicode=True), encoding="utf-8")
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        environment="test",
        config_dir=tmp_path,
        memory_summary=True,
        memory_summary_max_tokens=400,
    )

    with pytest.raises(TemplateConfigError) as info:
        load_config(settings)

    assert str(info.value) == (
        "tasks.yaml: memory_summary.max_tokens (300) must be at least MEMORY_SUMMARY_MAX_TOKENS (400)"
    )
    assert load_config(settings.model_copy(update={"memory_summary_max_tokens": 300})).summary_max_tokens == 300
