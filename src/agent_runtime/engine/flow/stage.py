"""One stage of a turn as a coroutine on the app's loop: call the model, run the tools it asks for, hand the results
back, until its answer validates against the stage's contract.

    loop:  reply = call_model(conversation)                       (the gateway: stream, events, billing, retries)
           tool calls, tools offered  ->  run them (concurrently), append the tool-call turn and the tool turns
                                          (after `max_tool_iterations` rounds: ask for the final answer, no tools)
           an answer                   ->  validate it; a bad one gets a repair turn, asked without tools
                                          (at most `max_json_retries` times, then StageOutputError)

A model that keeps making the same tool call and getting the same result ends the stage (`MAX_REPEATED_TOOL_CALLS`).
What the model sees is what CrewAI's agent executor sent before issue 30, byte for byte (engine/flow/wire.py).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from agent_runtime.engine.conversation.metadata import ToolCallSpec
from agent_runtime.engine.flow.contracts import StageName
from agent_runtime.engine.flow.model_call import CallModel, ModelCall, ModelReply, StageOutputError
from agent_runtime.engine.flow.stage_tools import StageTools
from agent_runtime.engine.flow.wire import (
    FORCE_FINAL_ANSWER,
    WireTurn,
    answer_turn,
    refused_tool_calls,
    repair_turn,
    tool_call_turn,
)
from agent_runtime.engine.llm.models import ToolSchema
from agent_runtime.engine.llm.repair import strip_code_fence, unusable_answer

ContractT = TypeVar("ContractT", bound=BaseModel)

# Model calls of a stage's tool loop before it must answer (it then makes one more call, for the answer). Budget
# holds count them (engine/runs/ledger/reservation.py).
MAX_TOOL_ITERATIONS = 6
# The same call with the same arguments and the same result this many times in a stage: the model is going round.
MAX_REPEATED_TOOL_CALLS = 5


@dataclass(frozen=True)
class StageSpec(Generic[ContractT]):
    """What a stage is: its contract, its calls' output cap (its YAML task), its tools, its limits, and what of its
    answer the client sees. `role` (the YAML agent's) names it when it goes round in circles."""

    stage: StageName
    contract: type[ContractT]
    max_tokens: int
    role: str
    tools: StageTools | None = None
    max_json_retries: int = 2
    max_tool_iterations: int = MAX_TOOL_ITERATIONS
    # Which route the stage belongs to (None: not decided yet), and whether its answer is the turn's answer, streamed
    # (on `answer_route` only, when set).
    route: str | None = None
    streams_answer: bool = False
    answer_route: str | None = None


@dataclass(frozen=True)
class StageAnswer(Generic[ContractT]):
    """The accepted answer, and the transcript the next stage of the turn starts with: the messages of the call
    that gave it (repair turns left out) and the answer as the model wrote it, so the provider's cache holds all of
    it (engine/flow/prompt.py)."""

    result: ContractT
    transcript: list[WireTurn]


async def run_stage(
    spec: StageSpec[ContractT], messages: Sequence[WireTurn], call_model: CallModel
) -> StageAnswer[ContractT]:
    conversation = list(messages)
    offered = spec.tools.schemas if spec.tools is not None else None
    repeats: Counter[str] = Counter()
    rounds = 0
    while True:
        if offered is not None and rounds >= spec.max_tool_iterations:
            conversation.append({"role": "user", "content": FORCE_FINAL_ANSWER})
            offered = None
        reply = await call_model(_call(spec, conversation, offered, attempt=0))
        if not (reply.tool_calls and offered is not None and spec.tools is not None):
            return await _answer(spec, conversation, reply, call_model, offered)
        contents = await spec.tools.run(spec.stage, reply.tool_calls)
        conversation += [tool_call_turn(reply.tool_calls, reply.reasoning), *contents.turns]
        for call, content in zip(reply.tool_calls, contents.contents, strict=True):
            _count_repeat(spec, repeats, call, content)
        rounds += 1


def _call(
    spec: StageSpec[ContractT], conversation: list[WireTurn], offered: list[ToolSchema] | None, *, attempt: int
) -> ModelCall:
    return ModelCall(
        messages=conversation,
        tools=offered,
        json_mode=True,
        stage=spec.stage,
        route=spec.route,
        streams_answer=spec.streams_answer,
        answer_route=spec.answer_route,
        attempt=attempt,
        max_tokens=spec.max_tokens,
        # A repair asks for the answer alone: offered the tools again, a model that answered in prose after a tool
        # result calls the same tool again instead of answering.
        allow_tools=attempt == 0,
    )


async def _answer(
    spec: StageSpec[ContractT],
    conversation: list[WireTurn],
    reply: ModelReply,
    call_model: CallModel,
    offered: list[ToolSchema] | None,
) -> StageAnswer[ContractT]:
    """Validate `reply`, the stage's answer to `conversation`; repair it until it validates or the repairs run out."""
    repaired = conversation
    attempt = 0
    while True:
        content = reply.content or ""
        if reply.tool_calls:
            # No tools offered, or none allowed in a repair: nothing would run these calls.
            problem = refused_tool_calls(reply.tool_calls)
        else:
            try:
                result = spec.contract.model_validate_json(strip_code_fence(content))
            except ValidationError as exc:
                problem = unusable_answer(content, reply.finish_reason, exc)
            else:
                return StageAnswer(result=result, transcript=[*conversation, answer_turn(content, reply.reasoning)])
        if attempt >= spec.max_json_retries:
            raise StageOutputError(
                f"stage {spec.stage!r}: the model's answer did not match {spec.contract.__name__} "
                f"after {attempt + 1} attempts",
                extra={"stage": spec.stage, "attempts": attempt + 1},
            )
        attempt += 1
        # The answer's text only: refused tool calls would need results.
        repaired = [*repaired, answer_turn(content, reply.reasoning), repair_turn(problem, spec.contract)]
        reply = await call_model(_call(spec, repaired, offered, attempt=attempt))


def _count_repeat(spec: StageSpec[ContractT], repeats: Counter[str], call: ToolCallSpec, content: str) -> None:
    try:
        arguments: object = json.loads(call.arguments)
    except ValueError:
        arguments = call.arguments
    key = json.dumps([call.name, arguments, content], sort_keys=True, default=str)
    repeats[key] += 1
    if repeats[key] >= MAX_REPEATED_TOOL_CALLS:
        raise StageOutputError(
            f"stage {spec.stage!r}: Agent '{spec.role}' called '{call.name}' with the same arguments "
            f"{MAX_REPEATED_TOOL_CALLS} times and got the same result each time. Stopped because it is not making "
            "progress.",
            extra={"stage": spec.stage, "tool": call.name},
        )


__all__ = ["MAX_TOOL_ITERATIONS", "StageAnswer", "StageSpec", "run_stage"]
