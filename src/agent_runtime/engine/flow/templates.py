"""CrewAI agent/task templates from config/crewai/{agents,tasks}.yaml, validated once at start-up.

Placeholders use `str.format` syntax (`{name}`). A stage's texts are in two parts, for DeepSeek's context cache
(engine/flow/prompt.py): what never changes (the agent's role, goal and backstory, the task's `description` and
`expected_output`) goes into the one system prompt, shared by every stage and turn; what changes with each call
(the execution and organization tasks' `request`) goes last, after the answer of the stage before. So the static
texts take no placeholders but `{output_schema}` (the stage contract's JSON schema, which the description must
use), and each stage's `request` may use the fields of that stage's variables model (all optional: the values are
also in the messages before the request):

    intent:        no request (the user's turn is the intent call's last message)
    execution:     user_input, intent_summary, execution_brief, ai_language
    organization:  user_input, intent_summary, execution_report, ai_language

The chat history is not a placeholder: it reaches the model as chat messages, ahead of the turn.

Every task has `max_tokens` (the output-token cap of each model call it makes, sent as the request's `max_tokens`;
a stage's tool loop and JSON repairs are capped call by call), `thinking` (enabled or disabled), and optionally
`model` (a LiteLLM id; default: the service's model) and `reasoning_effort` (low, high, max; thinking only).

`tasks.yaml` also holds `memory_summary`, the chat memory's summary task (engine/conversation/summary.py): the
model sees the dropped turns as messages and this task after them; placeholders `{max_words}*` (the
summary's length limit) and `{output_schema}*` (the ConversationSummary schema); and `memory_extraction`, the
long-term memories' extraction task (engine/user_memories/extraction.py), sent as a system message before the turn's
data: placeholders `{max_chars}*` (USER_MEMORIES_MAX_CHARS) and `{output_schema}*` (the MemoryExtraction schema).

Rendering is safe against user text containing braces: only the template (our YAML) is parsed for
placeholders; user values are substituted as values and never parsed again. Placeholders may not carry
attribute/index access, conversions or format specs, so a template cannot reach into objects or ask for
a 10**9-character padding.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agent_runtime.engine.conversation.summary import schema_text as summary_schema_text
from agent_runtime.engine.flow.contracts import (
    STAGE_CONTRACTS,
    ExecutionResult,
    StageName,
    intent_request,
)
from agent_runtime.engine.llm.models import CallOptions
from agent_runtime.engine.profiles.models import LanguageTag
from agent_runtime.engine.user_memories.extraction import schema_text as extraction_schema_text
from agent_runtime.settings import DEMO_MODEL, Settings

AGENTS_FILE = "agents.yaml"
TASKS_FILE = "tasks.yaml"
# Tools only for execution: intent and organization answer in one structured reply, which keeps the
# short-circuit path a single model call and lets the runner stream assistant_text from it.
TOOL_STAGES: frozenset[StageName] = frozenset({"execution"})


class TemplateConfigError(ValueError):
    """The CrewAI YAML configuration is invalid; the message names the file and the key."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _ToolGrant(_Frozen):
    name: str = Field(min_length=1)
    requires_approval: bool = False


class AgentTemplate(_Frozen):
    role: str = Field(min_length=1)
    goal: str = Field(min_length=1)
    backstory: str = Field(min_length=1)
    tools: list[str] = Field(default_factory=list)
    requires_approval: list[str] = Field(
        default_factory=list, description="Of `tools`, those that run only after the user approves the call."
    )

    @model_validator(mode="before")
    @classmethod
    def _tool_grants(cls, data: object) -> object:
        # YAML: `tools: [calculator, {name: update_bio, requires_approval: true}]`.
        if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
            return data
        grants = []
        for index, tool in enumerate(data["tools"]):
            try:
                grants.append(_ToolGrant(name=tool) if isinstance(tool, str) else _ToolGrant.model_validate(tool))
            except ValidationError as exc:
                error = exc.errors(include_url=False)[0]
                where = ".".join(map(str, ["tools", index, *error["loc"]]))
                raise ValueError(f"{where}: {error['msg']}") from None
        return {
            **data,
            "tools": [grant.name for grant in grants],
            "requires_approval": [grant.name for grant in grants if grant.requires_approval],
        }


class TaskTemplate(_Frozen):
    description: str = Field(min_length=1)
    expected_output: str = Field(min_length=1)
    # Required, so that no model call goes out without a cap on what it may cost in output tokens.
    max_tokens: int = Field(ge=1, description="The most output tokens one model call of this task may produce.")
    model: str | None = Field(
        default=None,
        min_length=1,
        description="LiteLLM model id of this task's calls; None: the service's model (LLM_MODEL, or "
        "deepseek/deepseek-flash with DEEPSEEK_API_KEY). Without a provider key every task runs on the demo model.",
    )
    # Required: DeepSeek thinks unless told not to, so the choice is always written down.
    thinking: Literal["enabled", "disabled"] = Field(description="Thinking mode (reasoning before the answer).")
    reasoning_effort: Literal["low", "high", "max"] | None = Field(
        default=None, description="How hard a thinking model thinks; None: the provider's default (high)."
    )

    @model_validator(mode="after")
    def _effort_needs_thinking(self) -> TaskTemplate:
        if self.reasoning_effort is not None and self.thinking == "disabled":
            raise ValueError("reasoning_effort needs thinking: enabled")
        return self

    @property
    def thinks(self) -> bool:
        return self.thinking == "enabled"


class StageTaskTemplate(TaskTemplate):
    request: str | None = Field(
        default=None,
        min_length=1,
        description="The per-call part, sent after the previous stage's answer; the intent stage has none (the "
        "user's turn is its last message).",
    )


class StageTemplates(_Frozen):
    agent: AgentTemplate
    task: StageTaskTemplate


class FlowTemplates(_Frozen):
    intent: StageTemplates
    execution: StageTemplates
    organization: StageTemplates
    memory_summary: TaskTemplate
    memory_extraction: TaskTemplate

    def render_extraction_task(self, max_chars: int) -> str:
        """The extraction call's system message (description and expected output)."""
        values = {"max_chars": str(max_chars), "output_schema": extraction_schema_text()}
        task = self.memory_extraction
        return f"{render_template(task.description, values)}\n\nExpected output: {task.expected_output}"

    def render_summary_task(self, max_words: int) -> str:
        """The summary task's request text (description and expected output, as a stage's request)."""
        values = {"max_words": str(max_words), "output_schema": summary_schema_text()}
        task = self.memory_summary
        return f"{render_template(task.description, values)}\n\nExpected output: {task.expected_output}"

    def user_turn(self, text: str) -> str:
        """A user turn of the history as its intent call sent it (the summary call sends the turns it condenses so)."""
        return intent_request(text)

    @property
    def summary_max_tokens(self) -> int:
        """The summary call's output cap (`memory_summary.max_tokens`)."""
        return self.memory_summary.max_tokens

    def granting(self, tools: Sequence[str], requires_approval: Sequence[str]) -> FlowTemplates:
        """These templates with `tools` granted to the execution stage after the YAML's own, in order (the tools of
        `TOOLS_FILE`); those in `requires_approval` run only after the user approves the call."""
        agent = self.execution.agent
        clash = sorted(set(tools) & set(agent.tools))
        if clash:
            raise TemplateConfigError(f"tools {clash} are granted in agents.yaml and configured in the tools file")
        granted = agent.model_copy(
            update={
                "tools": [*agent.tools, *tools],
                "requires_approval": [*agent.requires_approval, *requires_approval],
            }
        )
        return self.model_copy(update={"execution": self.execution.model_copy(update={"agent": granted})})

    def tasks(self) -> dict[str, TaskTemplate]:
        """Every task by its name in tasks.yaml (the three stages and memory_summary)."""
        return {
            "intent": self.intent.task,
            "execution": self.execution.task,
            "organization": self.organization.task,
            "memory_summary": self.memory_summary,
            "memory_extraction": self.memory_extraction,
        }

    def call_options(self, task: str, settings: Settings) -> CallOptions:
        """How `task`'s model calls are made: its model (the demo model for every task without a provider key),
        thinking and effort."""
        template = self.tasks()[task]
        model = DEMO_MODEL if settings.is_demo_model else template.model or settings.effective_llm_model
        return CallOptions(model=model, thinking=template.thinks, reasoning_effort=template.reasoning_effort)

    def stage(self, name: StageName) -> StageTemplates:
        return {"intent": self.intent, "execution": self.execution, "organization": self.organization}[name]


@functools.cache
def output_schema(stage: StageName) -> str:
    """The stage contract's JSON schema, as `{output_schema}` renders it."""
    # Building a JSON schema is pydantic work on every call otherwise; the contracts never change at run time.
    return json.dumps(STAGE_CONTRACTS[stage].model_json_schema(), ensure_ascii=False, separators=(",", ":"))


class _StageVariables(_Frozen):
    stage: ClassVar[StageName]
    # Placeholders the stage's task description must use to be workable; the other fields are optional.
    required: ClassVar[frozenset[str]]

    user_input: str
    ai_language: LanguageTag

    @classmethod
    def placeholders(cls) -> frozenset[str]:
        return frozenset(cls.model_fields)

    def template_values(self) -> dict[str, str]:
        # Every value is JSON text: strings arrive quoted and escaped, so a user message cannot fake the end
        # of its own section of the prompt; structured values (the execution report) are JSON anyway.
        return {name: json.dumps(value, ensure_ascii=False) for name, value in self.model_dump(mode="json").items()}


class IntentVariables(_StageVariables):
    stage: ClassVar[StageName] = "intent"
    # No request template: `user_input` is the request itself.
    required: ClassVar[frozenset[str]] = frozenset()


class ExecutionVariables(_StageVariables):
    stage: ClassVar[StageName] = "execution"
    # The brief is also in the intent answer right before the request: repeating it is the template's choice.
    required: ClassVar[frozenset[str]] = frozenset()

    intent_summary: str
    execution_brief: str


class OrganizationVariables(_StageVariables):
    stage: ClassVar[StageName] = "organization"
    # The report is the execution answer right before the request; the reply language is in the profile.
    required: ClassVar[frozenset[str]] = frozenset()

    intent_summary: str
    execution_report: ExecutionResult


StageVariables = IntentVariables | ExecutionVariables | OrganizationVariables
STAGE_VARIABLES: dict[StageName, type[StageVariables]] = {
    "intent": IntentVariables,
    "execution": ExecutionVariables,
    "organization": OrganizationVariables,
}


def render_template(template: str, values: Mapping[str, str]) -> str:
    """Fill a validated template; `values` are inserted verbatim and never re-parsed."""
    return template.format_map(values)
