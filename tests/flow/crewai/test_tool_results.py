"""A run's tool results reach it once each, in the order the model made the calls: handed over by our tools as
they finish, or read from CrewAI's tool turns for the calls CrewAI answered itself."""

from __future__ import annotations

import asyncio
import json

from tests.flow.crewai.test_crew_flow import CONTEXT, TOOLS

from agent_runtime.engine.conversation.metadata import ToolCallSpec
from agent_runtime.engine.flow.crewai.tool_results import ArgumentsMatch, RunToolCalls
from agent_runtime.engine.flow.crewai.tools import RuntimeToolAdapter, ToolCalls
from agent_runtime.engine.flow.model_call import StageToolResult
from agent_runtime.engine.flow.tools import ToolOutcome

FIRST = ToolCallSpec(id="call_1", name="calculator", arguments='{"expression": "1 + 1"}')
SECOND = ToolCallSpec(id="call_2", name="calculator", arguments='{"expression": "2 + 2"}')


def result(call: ToolCallSpec, content: str, *, is_error: bool = False) -> StageToolResult:
    return StageToolResult(stage="execution", call_id=call.id, name=call.name, content=content, is_error=is_error)


def expression_is(expected: str) -> ArgumentsMatch:
    return lambda arguments: json.loads(arguments)["expression"] == expected


async def ledger() -> tuple[RunToolCalls, list[StageToolResult]]:
    events: list[StageToolResult] = []
    calls = RunToolCalls(events.append, asyncio.get_running_loop())
    calls.issue("execution", [FIRST, SECOND])
    return calls, events


async def test_a_result_waits_for_the_results_of_earlier_calls() -> None:
    calls, events = await ledger()
    calls.hand_over("calculator", expression_is("2 + 2"), ToolOutcome(ok=True, content="4"))
    assert events == []
    calls.hand_over("calculator", expression_is("1 + 1"), ToolOutcome.failure("no"))
    assert events == [result(FIRST, '{"error": "no"}', is_error=True), result(SECOND, "4")]


async def test_calls_crewai_answered_itself_are_read_from_its_tool_turns_once() -> None:
    calls, events = await ledger()
    calls.hand_over("calculator", expression_is("2 + 2"), ToolOutcome(ok=True, content="4"))
    turns = [
        {"role": "tool", "tool_call_id": "call_1", "content": "Error executing tool: bad arguments"},
        {"role": "tool", "tool_call_id": "call_2", "content": "what CrewAI wrote"},
        {"role": "tool", "tool_call_id": "call_from_the_history", "content": "old"},
    ]
    calls.observe(turns)
    calls.observe(turns)
    assert events == [result(FIRST, '{"error": "bad arguments"}', is_error=True), result(SECOND, "4")]


async def test_a_hand_over_for_no_open_call_is_ignored_and_a_stage_end_releases_what_is_left() -> None:
    calls, events = await ledger()
    calls.hand_over("calculator", expression_is("3 + 3"), ToolOutcome(ok=True, content="6"))
    calls.hand_over("current_time", expression_is("2 + 2"), ToolOutcome(ok=True, content="now"))
    calls.hand_over("calculator", expression_is("2 + 2"), ToolOutcome(ok=True, content="4"))
    assert events == []
    calls.stage_ended([])  # e.g. a result_as_answer tool ended the loop before the first call ran
    assert events == [result(SECOND, "4")]


async def test_our_tool_hands_its_outcome_over_under_the_call_its_arguments_match() -> None:
    loop = asyncio.get_running_loop()
    events: list[StageToolResult] = []
    results = RunToolCalls(events.append, loop)
    results.issue("execution", [FIRST, SECOND])
    toolset = TOOLS.build_for_run(["calculator"], CONTEXT)
    adapter = RuntimeToolAdapter.wrap(TOOLS.get("calculator"), toolset, loop, ToolCalls(), results)

    # As CrewAI's executor runs a tool: on a worker thread, with the arguments validated by the tool's schema.
    assert json.loads(await asyncio.to_thread(adapter.run, expression="1 + 1")) == {
        "expression": "1 + 1",
        "result": "2",
    }
    await asyncio.sleep(0)

    assert events == [result(FIRST, '{"expression":"1 + 1","result":"2"}')]
