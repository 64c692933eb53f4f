"""The offline demo model through LLMClient: no network, no key, valid output for the three agent stages."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel

from agent_runtime.engine.billing import CostBreakdown, LLMUsage
from agent_runtime.engine.flow.contracts import ExecutionResult, IntentResult, OrganizationResult
from agent_runtime.engine.llm import (
    FunctionSpec,
    LLMClient,
    LLMRequest,
    LLMResponse,
    ToolSchema,
    WireMessage,
    WireToolCall,
)
from agent_runtime.settings import Settings

CALCULATOR = ToolSchema(
    function=FunctionSpec(name="calculator", parameters={"type": "object", "properties": {"expression": {}}})
)
CURRENT_TIME = ToolSchema(function=FunctionSpec(name="current_time"))


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the demo model must not open network connections")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield


@pytest.fixture
def client(demo_settings: Settings) -> LLMClient:
    return LLMClient(demo_settings)


def schema_of(contract: type[BaseModel]) -> str:
    return json.dumps(contract.model_json_schema(), separators=(",", ":"))


def appended_schema(contract: type[BaseModel], request: str, *history: WireMessage) -> list[WireMessage]:
    """The request with the schema appended to it, after a system prompt and history (CrewAI adapter style)."""
    instruction = f"Answer with exactly one JSON object that validates against this JSON schema:\n{schema_of(contract)}"
    return [
        WireMessage(role="system", content="You are the assistant."),
        *history,
        WireMessage(role="user", content=f"{request}\n\n{instruction}"),
    ]


def templated(contract: type[BaseModel], request: str, extra: str = "") -> list[WireMessage]:
    """The request quoted inside a task template that itself talks about dates, times and arithmetic."""
    task = (
        f"The user's latest message (a JSON string): {json.dumps(request, ensure_ascii=False)}\n{extra}\n"
        "NEEDS_EXECUTION: the answer needs a tool (the current date or time, exact arithmetic like 2+2).\n"
        f"Answer with ONLY a JSON object that matches this JSON schema:\n{schema_of(contract)}"
    )
    return [WireMessage(role="system", content="policy"), WireMessage(role="user", content=task)]


def schema_last(contract: type[BaseModel], request: str) -> list[WireMessage]:
    return [WireMessage(role="user", content=request), WireMessage(role="system", content=schema_of(contract))]


async def ask(client: LLMClient, messages: list[WireMessage], tools: list[ToolSchema] | None = None) -> LLMResponse:
    return await client.complete(LLMRequest(messages=messages, tools=tools, json_mode=True))


async def test_plain_answer_is_labelled_priced_at_zero_and_offline(client: LLMClient, no_network: None) -> None:
    response = await client.complete(LLMRequest(messages=[WireMessage(role="user", content="hello")]))
    assert response == LLMResponse(
        model="demo/agent",
        content="[demo model] This is the offline demo model; no language model provider is configured."
        ' You said: "hello"',
        tool_calls=[],
        usage=LLMUsage(prompt_tokens=5, completion_tokens=24, total_tokens=29),
        cost=CostBreakdown(
            cost=Decimal(0),
            cost_source="custom_pricing",
            input_tokens=5,
            output_tokens=24,
            cache_hit_tokens=0,
            cache_miss_tokens=5,
            price_tier="standard",
            price_effective_from=datetime(2000, 1, 1, tzinfo=UTC),
        ),
        finish_reason="stop",
        is_demo=True,
    )


@pytest.mark.parametrize("layout", [appended_schema, templated, schema_last])
async def test_intent_small_talk_is_a_direct_demo_answer(client: LLMClient, layout: Any, no_network: None) -> None:
    response = await ask(client, layout(IntentResult, "Tell me a joke about cats"))
    result = IntentResult.model_validate_json(response.content)
    assert result.route == "DIRECT_EXECUTION"
    assert result.assistant_text is not None and result.assistant_text.startswith("[demo model]")
    assert "Tell me a joke about cats" in result.assistant_text
    assert (result.execution_brief, result.safety_flags) == (None, [])


@pytest.mark.parametrize("layout", [appended_schema, templated, schema_last])
@pytest.mark.parametrize(
    "request_text", ["what is 12 * (3 + 4)?", "现在几点了？", "What's the date today?", "算一下 7×8"]
)
async def test_intent_arithmetic_or_time_needs_execution(
    client: LLMClient, layout: Any, request_text: str, no_network: None
) -> None:
    result = IntentResult.model_validate_json((await ask(client, layout(IntentResult, request_text))).content)
    assert (result.route, result.assistant_text) == ("NEEDS_EXECUTION", None)
    assert result.execution_brief


async def test_intent_reads_the_latest_request_not_the_history(client: LLMClient) -> None:
    history = [
        WireMessage(role="user", content="what time is it?"),
        WireMessage(role="assistant", content="It is noon."),
    ]
    result = IntentResult.model_validate_json(
        (await ask(client, appended_schema(IntentResult, "thanks!", *history))).content
    )
    assert result.route == "DIRECT_EXECUTION"


async def test_execution_calls_the_calculator_then_reports_its_result(client: LLMClient) -> None:
    messages = templated(ExecutionResult, "what is 12 * (3 + 4)?", extra='Carry out this brief: "compute it"')
    first = await ask(client, messages, tools=[CURRENT_TIME, CALCULATOR])
    assert (first.content, first.finish_reason) == ("", "tool_calls")
    [call] = first.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("calculator", {"expression": "12 * (3 + 4)"})
    assert call.id.startswith("call_demo_")

    followed = [
        *messages,
        WireMessage(
            role="assistant",
            tool_calls=[WireToolCall(id=call.id, function={"name": call.name, "arguments": call.arguments})],
        ),
        WireMessage(role="tool", tool_call_id=call.id, content='{"expression": "12 * (3 + 4)", "result": "84"}'),
    ]
    second = await ask(client, followed, tools=[CURRENT_TIME, CALCULATOR])
    result = ExecutionResult.model_validate_json(second.content)
    assert result.status == "SUCCESS"
    assert result.execution_summary.startswith("[demo model] calculator returned")
    assert "84" in result.execution_summary
    assert result.execution_data == {
        "tool_results": [
            {"tool_call_id": call.id, "name": "calculator", "output": '{"expression": "12 * (3 + 4)", "result": "84"}'}
        ]
    }


async def test_execution_asks_for_the_time_with_empty_arguments(client: LLMClient) -> None:
    response = await ask(client, appended_schema(ExecutionResult, "现在几点？"), tools=[CALCULATOR, CURRENT_TIME])
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("current_time", "{}")]


async def test_execution_without_tools_still_returns_a_valid_result(client: LLMClient) -> None:
    response = await ask(client, appended_schema(ExecutionResult, "what is 1+1"))
    result = ExecutionResult.model_validate_json(response.content)
    assert (result.status, response.tool_calls) == ("PARTIAL", [])


async def test_organization_writes_the_answer_from_the_report(client: LLMClient) -> None:
    report = {"status": "SUCCESS", "execution_summary": "[demo model] calculator returned 84", "report_brief": "say 84"}
    extra = f"The execution report (a JSON object): {json.dumps(report)}"
    response = await ask(client, templated(OrganizationResult, "what is 12 * (3 + 4)?", extra=extra))
    assert OrganizationResult.model_validate_json(response.content) == OrganizationResult(
        assistant_text="[demo model] calculator returned 84", response_metadata={"demo": True}
    )


async def test_streaming_demo_yields_several_pieces_of_valid_json(client: LLMClient, no_network: None) -> None:
    pieces: list[str] = []

    async def on_delta(text: str) -> bool:
        pieces.append(text)
        return True

    request = LLMRequest(messages=appended_schema(IntentResult, "hello there"), json_mode=True)
    response = await client.complete_streaming(request, on_delta)
    assert len(pieces) > 5
    assert "".join(pieces) == response.content
    assert IntentResult.model_validate_json(response.content).route == "DIRECT_EXECUTION"
    assert response.usage is not None and response.usage.completion_tokens > 0
    assert (response.is_demo, response.cost.cost_source) == (True, "custom_pricing")


async def test_streaming_demo_tool_call(client: LLMClient) -> None:
    request = LLMRequest(messages=appended_schema(ExecutionResult, "2^10 = ?"), tools=[CALCULATOR], json_mode=True)
    response = await client.complete_streaming(request)
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("calculator", '{"expression": "2**10"}')]
    assert response.finish_reason == "tool_calls"


async def test_streaming_demo_intent_reasons_first(client: LLMClient) -> None:
    reasoning: list[str] = []
    request = LLMRequest(messages=appended_schema(IntentResult, "hello there"), json_mode=True)

    response = await client.complete_streaming(request, on_reasoning=reasoning.append)

    assert len(reasoning) > 1 and "".join(reasoning) == response.reasoning
    assert response.reasoning.startswith("[demo model] Reading the request: hello there")
    assert response.reasoning.endswith("I can answer directly.")
    assert IntentResult.model_validate_json(response.content).route == "DIRECT_EXECUTION"
    whole = await client.complete(request.model_copy(update={"stream": False}))
    assert whole.reasoning == response.reasoning
