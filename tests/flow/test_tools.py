from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest
from pydantic import BaseModel, ValidationError

from agent_runtime.engine.flow.tools import (
    BUILTIN_TOOLS,
    CalculatorTool,
    CurrentTimeTool,
    Tool,
    ToolArgs,
    ToolError,
    ToolOutcome,
    ToolRegistry,
    evaluate_expression,
)
from agent_runtime.engine.profiles.models import PreferenceSettings, ProfileSettingsV2, UserAgentContext

WINTER = datetime(2026, 1, 15, 12, 0, 0, 123456, tzinfo=UTC)
SUMMER = datetime(2026, 7, 15, 12, 0, 0, tzinfo=UTC)


def _ctx(timezone: str = "Asia/Shanghai") -> UserAgentContext:
    return UserAgentContext(
        user_id=UUID(int=1),
        username="alice",
        bio=None,
        settings=ProfileSettingsV2(preferences=PreferenceSettings(timezone=timezone)),
    )


def _failure(error: str) -> ToolOutcome:
    return ToolOutcome(ok=False, content=json.dumps({"error": error}), error=error)


async def _calc(expression: str) -> ToolOutcome:
    return await CalculatorTool().run(json.dumps({"expression": expression}), _ctx())


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("0.1 + 0.2", "0.3"),
        ("(12.5 + 7) * 3 / sqrt(16)", "14.625"),
        ("2 ** 10", "1024"),
        ("-2 ** 2", "-4"),
        ("(-2) ** 2", "4"),
        ("3 ** -2", "0.1111111111111111111111111111"),
        ("1 / 3", "0.3333333333333333333333333333"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("-7 % 2", "1"),
        ("7 % -2", "-1"),
        ("7.5 % 2", "1.5"),
        ("sqrt(2)", "1.414213562373095048801688724"),
        ("abs(-3.50)", "3.5"),
        ("round(2.5)", "3"),
        ("round(2.675, 2)", "2.68"),
        ("floor(-2.5) + ceil(2.1)", "0"),
        ("2 * 3.0", "6"),
        ("1e3 + +1", "1001"),
        ("-0", "0"),
        ("10 ** 100", "1" + "0" * 100),
    ],
)
async def test_calculator_exact_results(expression: str, result: str) -> None:
    assert await _calc(expression) == ToolOutcome(
        ok=True, content=json.dumps({"expression": expression, "result": result}, separators=(",", ":"))
    )


UNDEFINED = (
    "undefined or unrepresentable result (such as 0/0, the square root of a negative number, "
    "or an integer result of more than 28 digits)"
)


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("x + 1", "unknown name 'x'"),
        ("__import__('os').system('id')", "unsupported function \"__import__('os').system\""),
        ("__import__('os')", "unsupported function '__import__'"),
        ("(1).__class__", "unsupported syntax: Attribute"),
        ("().__class__.__bases__[0]", "unsupported syntax: Subscript"),
        ("pow(2, 3)", "unsupported function 'pow'"),
        ("sqrt(1, 2)", "wrong number of arguments for sqrt()"),
        ("round(x=1)", "wrong number of arguments for round()"),
        ("round(1.5, 0.5)", "round digits must be an integer from 0 to 20"),
        ("'a' * 3", "unsupported constant 'a'"),
        ("True + 1", "unsupported constant True"),
        ("1 if 1 else 2", "unsupported syntax: IfExp"),
        ("lambda: 1", "unsupported syntax: Lambda"),
        ("1 < 2", "unsupported syntax: Compare"),
        ("9 ** 9 ** 9", "exponent too large (limit 1000)"),
        ("2 ** 1001", "exponent too large (limit 1000)"),
        ("10 ** 101", "result too large (limit 1e101)"),
        ("1e400", "result too large (limit 1e101)"),
        ("1 / 0", "division by zero"),
        ("5 // 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("0 / 0", UNDEFINED),
        ("sqrt(-1)", UNDEFINED),
        ("1 +", "invalid expression syntax"),
        ("import os", "invalid expression syntax"),
    ],
)
async def test_calculator_rejections(expression: str, error: str) -> None:
    assert await _calc(expression) == _failure(error)


async def test_calculator_rejects_too_long_input_before_parsing() -> None:
    expression = "1+" * 100 + "1"
    assert await _calc(expression) == _failure(
        "invalid arguments: expression: String should have at most 200 characters"
    )
    with pytest.raises(ToolError, match="expression longer than 200 characters"):
        evaluate_expression(expression)


@pytest.mark.parametrize(
    ("args_json", "error"),
    [
        ("not json", "invalid arguments: Invalid JSON: expected ident at line 1 column 2"),
        ("[1]", "invalid arguments: Input should be an object"),
        ("{}", "invalid arguments: expression: Field required"),
        ('{"expression": 42}', "invalid arguments: expression: Input should be a valid string"),
        ('{"expression": "1", "mode": "float"}', "invalid arguments: mode: Extra inputs are not permitted"),
    ],
)
async def test_bad_arguments_become_failed_outcomes(args_json: str, error: str) -> None:
    assert await CalculatorTool().run(args_json, _ctx()) == _failure(error)


@pytest.mark.parametrize(
    ("timezone", "now", "iso", "weekday"),
    [
        ("Asia/Shanghai", WINTER, "2026-01-15T20:00:00+08:00", "Thursday"),
        ("Europe/Paris", WINTER, "2026-01-15T13:00:00+01:00", "Thursday"),
        ("Europe/Paris", SUMMER, "2026-07-15T14:00:00+02:00", "Wednesday"),
        ("Asia/Shanghai", datetime(2026, 1, 15, 17, 30, tzinfo=UTC), "2026-01-16T01:30:00+08:00", "Friday"),
    ],
)
async def test_current_time_uses_the_profile_time_zone(timezone: str, now: datetime, iso: str, weekday: str) -> None:
    outcome = await CurrentTimeTool(clock=lambda: now).run("{}", _ctx(timezone))
    assert outcome == ToolOutcome(
        ok=True, content=json.dumps({"iso": iso, "weekday": weekday, "timezone": timezone}, separators=(",", ":"))
    )


async def test_current_time_with_the_real_clock_and_an_empty_argument_string() -> None:
    outcome = await CurrentTimeTool().run("", _ctx("Asia/Shanghai"))
    result = json.loads(outcome.content)
    local = datetime.fromisoformat(result["iso"])
    assert outcome.ok
    assert local.utcoffset() == timedelta(hours=8)
    assert abs(local - datetime.now(UTC)) < timedelta(seconds=5)


async def test_current_time_rejects_a_time_zone_from_the_model() -> None:
    outcome = await CurrentTimeTool().run('{"timezone": "UTC"}', _ctx("Asia/Shanghai"))
    assert outcome == _failure("invalid arguments: timezone: Extra inputs are not permitted")


class _NoArgs(ToolArgs):
    pass


class _Hanging(Tool[_NoArgs]):
    def __init__(self) -> None:
        super().__init__(name="hanging", description="never returns", args_model=_NoArgs, timeout_seconds=0.05)

    async def execute(self, args: _NoArgs, ctx: UserAgentContext) -> BaseModel:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class _Broken(Tool[_NoArgs]):
    def __init__(self) -> None:
        super().__init__(name="broken", description="has a bug", args_model=_NoArgs)

    async def execute(self, args: _NoArgs, ctx: UserAgentContext) -> BaseModel:
        raise RuntimeError("secret internal detail")


async def test_a_hanging_tool_times_out() -> None:
    assert await _Hanging().run("{}", _ctx()) == _failure("hanging timed out after 0.05 s")


async def test_an_unexpected_exception_is_reported_without_its_details() -> None:
    assert await _Broken().run("{}", _ctx()) == _failure("broken failed with an internal error")


def test_builtin_registry_names() -> None:
    # The whole schema the model gets for each tool is asserted where it is built: tests/flow/crewai/test_crew_flow.py.
    assert BUILTIN_TOOLS.names() == ["current_time", "calculator"]


def test_registry_rejects_unknown_and_duplicate_names() -> None:
    with pytest.raises(KeyError, match="unknown tool 'shell'"):
        BUILTIN_TOOLS.get("shell")
    with pytest.raises(KeyError, match="unknown tool 'shell'"):
        BUILTIN_TOOLS.build_for_run(["shell"], _ctx())
    with pytest.raises(ValueError, match="duplicate tool name 'calculator'"):
        ToolRegistry([CalculatorTool(), CalculatorTool()])


async def test_run_tool_set_binds_the_users_context() -> None:
    registry = ToolRegistry([CurrentTimeTool(clock=lambda: WINTER), CalculatorTool()])
    toolset = registry.build_for_run(["current_time"], _ctx("Europe/Paris"))
    assert toolset.names() == ["current_time"]
    assert await toolset.run("current_time", "{}") == ToolOutcome(
        ok=True, content='{"iso":"2026-01-15T13:00:00+01:00","weekday":"Thursday","timezone":"Europe/Paris"}'
    )
    # A tool the stage was not granted is reported to the model, not raised.
    assert await toolset.run("calculator", '{"expression": "1+1"}') == _failure(
        "unknown tool 'calculator'; available: current_time"
    )


def test_tool_outcome_error_is_set_exactly_when_failed() -> None:
    with pytest.raises(ValidationError, match="error must be set exactly when ok is false"):
        ToolOutcome(ok=True, content="{}", error="boom")
    with pytest.raises(ValidationError, match="error must be set exactly when ok is false"):
        ToolOutcome(ok=False, content="{}")
