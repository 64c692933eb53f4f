"""The chat-completions messages a stage adds to its conversation: tool turns and repair turns.

Their shape is the one the model has seen in every earlier request (CrewAI's executor built it until issue 30, and
the recorded requests of tests/runs/test_recorded_requests.py hold it byte for byte): a provider caches whole
prefixes, so a turn written differently would cost every later call of the conversation its cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from agent_runtime.engine.conversation.metadata import ToolCallSpec
from agent_runtime.engine.llm.repair import repair_text

WireTurn = dict[str, Any]
"""A chat-completions message as the LLM layer sends it on (engine/llm/models.py `WireMessage` validates it)."""


def tool_call_turn(calls: Sequence[ToolCallSpec], reasoning: str | None) -> WireTurn:
    """The assistant turn of a reply's tool calls; a thinking model's reasoning goes back on it (DeepSeek answers 400
    without it in a later thinking-mode request)."""
    turn: WireTurn = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in calls
        ],
    }
    if reasoning is not None:
        turn["reasoning_content"] = reasoning
    return turn


def tool_turn(call: ToolCallSpec, content: str) -> WireTurn:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}


def answer_turn(content: str, reasoning: str | None) -> WireTurn:
    """An answer without tool calls, as the model wrote it, with its reasoning (thinking mode): DeepSeek wants the
    reasoning of every earlier assistant message back in a request with tools."""
    turn: WireTurn = {"role": "assistant", "content": content}
    if reasoning is not None:
        turn["reasoning_content"] = reasoning
    return turn


def refused_tool_calls(calls: Sequence[ToolCallSpec]) -> str:
    """The repair turn's problem for tool calls in an answer that may call no tool (nothing runs them)."""
    names = ", ".join(dict.fromkeys(call.name for call in calls))
    return f"it called {names}, but no tool can be called in this answer"


def repair_turn(problem: str, contract: type[BaseModel]) -> WireTurn:
    """Asks for the contract again; the schemas are in the system prompt (engine/flow/prompt.py)."""
    return {"role": "user", "content": repair_text(problem, contract, where="in the system prompt")}


FORCE_FINAL_ANSWER = (
    "Now it's time you MUST give your absolute best final answer. You'll ignore all previous instructions, stop using "
    "any tools, and just return your absolute BEST Final answer."
)
"""The user turn after a stage's last allowed round of tool calls (CrewAI's text for it, which the stage kept)."""
