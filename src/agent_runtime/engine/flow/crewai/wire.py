"""Chat-completions messages between CrewAI and our LLM layer: filtering, JSON-mode instructions, repair turns."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from agent_runtime.engine.conversation.metadata import ToolCallSpec
from agent_runtime.engine.llm.repair import repair_text

if TYPE_CHECKING:
    from crewai.utilities.types import LLMMessage

# `reasoning_content`: a thinking model's reasoning on an assistant tool-call turn, which DeepSeek must get back in
# every later request (history turns carry it from memory; the stage's own get it back in `wire_messages`).
_MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"})


def wire_messages(
    messages: str | list[LLMMessage], reasoning_by_call: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The OpenAI keys of CrewAI's messages; `reasoning_by_call` (tool call id -> the reasoning of the reply that
    made the call) is put back on tool-call turns that lack it.

    CrewAI rebuilds the assistant turn of the tool calls it was handed (ids, names, arguments only), so within a
    stage's tool loop the reasoning that came with them is lost on the way back.
    """
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    wire = [{key: value for key, value in message.items() if key in _MESSAGE_KEYS} for message in messages]
    if reasoning_by_call:
        for message in wire:
            if message.get("role") == "assistant" and message.get("reasoning_content") is None:
                _restore_reasoning(message, reasoning_by_call)
    return wire


def _restore_reasoning(message: dict[str, Any], reasoning_by_call: Mapping[str, str]) -> None:
    for call in message.get("tool_calls") or ():
        reasoning = reasoning_by_call.get(str(call.get("id")))
        if reasoning is not None:
            message["reasoning_content"] = reasoning
            return


def wire_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    # CrewAI marks every function "strict"; strict mode needs schemas CrewAI does not guarantee
    # (all properties required, additionalProperties false) and DeepSeek only knows it in beta.
    cleaned: list[dict[str, Any]] = []
    for tool in tools:
        function = {key: value for key, value in dict(tool.get("function", {})).items() if key != "strict"}
        cleaned.append({**tool, "function": function})
    return cleaned


def schema_instruction(contract: type[BaseModel]) -> str:
    """The JSON-mode instruction added to a stage's system message (public for prompt tests)."""
    schema = json.dumps(contract.model_json_schema(), ensure_ascii=False, separators=(",", ":"))
    return (
        "Answer with exactly one JSON object, no prose and no code fences, "
        f"that validates against this JSON schema:\n{schema}"
    )


def with_schema_instruction(messages: list[dict[str, Any]], contract: type[BaseModel]) -> list[dict[str, Any]]:
    # Appended to the last user message (the stage's request; tool turns come after it): the system
    # message and the history stay byte-identical across stages, so the provider's prefix cache keeps
    # hitting on them. Skipped when the request already carries the instruction (e.g. a YAML template).
    instruction = schema_instruction(contract)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str) and instruction in content:
            return messages
        merged = {**message, "content": f"{content or ''}\n\n{instruction}"}
        return [*messages[:index], merged, *messages[index + 1 :]]
    return [*messages, {"role": "user", "content": instruction}]


def refused_tool_calls(calls: Sequence[ToolCallSpec]) -> str:
    """The repair turn's problem for tool calls in an answer that may call no tool (nothing runs them)."""
    names = ", ".join(dict.fromkeys(call.name for call in calls))
    return f"it called {names}, but no tool can be called in this answer"


def repair_instruction(problem: str, contract: type[BaseModel], *, schema_in_request: bool) -> str:
    return repair_text(problem, contract, where="in my request" if schema_in_request else "in the system prompt")


REQUEST_END = "\u2063"
"""The flow's CrewAI `prompt_template` (engine/flow/crewai/flow.py). CrewAI writes a stage's request as
`<request>\n<prompt_template>`; the model gets the request alone, byte for byte what the flow wrote (for the intent
stage, the user's own turn), so that later calls repeat it exactly (the provider caches whole prefixes)."""
_REQUEST_SUFFIX = "\n" + REQUEST_END


def without_request_end(wire: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for message in wire:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and content.endswith(_REQUEST_SUFFIX):
            message["content"] = content.removesuffix(_REQUEST_SUFFIX)
    return wire


def arguments_crewai_cannot_take(arguments: str) -> bool:
    # CrewAI (1.15.30, agent_executor._execute_single_native_tool_call) tells the model when a tool call's
    # arguments are not JSON, runs a falsy JSON value as {} and a string into the tool's error; a list, a
    # number or true breaks its ToolUsageStartedEvent (pydantic), outside its error handling.
    try:
        value = json.loads(arguments)
    except ValueError:
        return False
    return bool(value) and not isinstance(value, dict | str)
