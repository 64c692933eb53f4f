"""Chat-completions messages between CrewAI and our LLM layer: filtering, JSON-mode instructions, repair turns."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    from crewai.utilities.types import LLMMessage

_MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})
_REPAIR_ERROR_CHARS = 600


def wire_messages(messages: str | list[LLMMessage]) -> list[dict[str, Any]]:
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    return [{key: value for key, value in message.items() if key in _MESSAGE_KEYS} for message in messages]


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


def strip_code_fence(content: str) -> str:
    text = content.strip()
    if text.startswith("```") and text.endswith("```"):
        text = text[3:-3]
        if text.startswith("json"):
            text = text[4:]
    return text.strip()


def repair_instruction(error: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or '(root)'}: {item['msg']}" for item in error.errors()
    )
    return (
        "Your previous answer could not be used: "
        f"{problems[:_REPAIR_ERROR_CHARS]}. Answer again with only the JSON object that matches the schema."
    )
