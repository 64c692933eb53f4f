from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from agent_runtime.engine.flow.contracts import (
    STAGE_CONTRACTS,
    ExecutionResult,
    IntentResult,
    OrganizationResult,
)


def _errors(model: type[BaseModel], payload: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(payload)
    return [(".".join(map(str, err["loc"])), err["msg"]) for err in info.value.errors()]


def test_direct_route_with_text_dumps_whole() -> None:
    result = IntentResult.model_validate_json(
        '{"route":"DIRECT_EXECUTION","assistant_text":"你好！","intent_summary":"greeting"}'
    )
    assert result.model_dump() == {
        "route": "DIRECT_EXECUTION",
        "assistant_text": "你好！",
        "intent_summary": "greeting",
        "execution_brief": None,
        "safety_flags": [],
    }


def test_needs_execution_route_with_brief_dumps_whole() -> None:
    result = IntentResult(
        route="NEEDS_EXECUTION",
        intent_summary="wants the time",
        execution_brief="Get the current time in the user's time zone.",
        safety_flags=["none_expected"],
    )
    assert result.model_dump() == {
        "route": "NEEDS_EXECUTION",
        "assistant_text": None,
        "intent_summary": "wants the time",
        "execution_brief": "Get the current time in the user's time zone.",
        "safety_flags": ["none_expected"],
    }


@pytest.mark.parametrize("text", [None, "", "  \n\t"])
def test_direct_route_requires_non_blank_assistant_text(text: str | None) -> None:
    payload = {"route": "DIRECT_EXECUTION", "intent_summary": "x", "assistant_text": text, "execution_brief": "b"}
    assert _errors(IntentResult, payload) == [("", "Value error, assistant_text is required for DIRECT_EXECUTION")]


@pytest.mark.parametrize("brief", [None, "", "   "])
def test_needs_execution_route_requires_non_blank_brief(brief: str | None) -> None:
    payload = {"route": "NEEDS_EXECUTION", "intent_summary": "x", "assistant_text": "hi", "execution_brief": brief}
    assert _errors(IntentResult, payload) == [("", "Value error, execution_brief is required for NEEDS_EXECUTION")]


def test_unknown_route_and_missing_summary_are_rejected() -> None:
    assert _errors(IntentResult, {"route": "MAYBE"}) == [
        ("route", "Input should be 'DIRECT_EXECUTION' or 'NEEDS_EXECUTION'"),
        ("intent_summary", "Field required"),
    ]


def test_execution_success_dumps_whole() -> None:
    result = ExecutionResult(
        status="SUCCESS",
        execution_summary="Computed 2+2 with the calculator.",
        execution_data={"calculator": {"expression": "2+2", "result": "4"}},
        report_brief="Tell the user the answer is 4.",
    )
    assert result.model_dump() == {
        "status": "SUCCESS",
        "execution_summary": "Computed 2+2 with the calculator.",
        "execution_data": {"calculator": {"expression": "2+2", "result": "4"}},
        "report_brief": "Tell the user the answer is 4.",
        "error_message": None,
    }


@pytest.mark.parametrize("message", [None, "", "  "])
def test_failed_execution_requires_error_message(message: str | None) -> None:
    payload = {"status": "FAILED", "execution_summary": "s", "report_brief": "r", "error_message": message}
    assert _errors(ExecutionResult, payload) == [("", "Value error, error_message is required when status is FAILED")]


def test_failed_execution_with_reason_and_partial_without_one_are_valid() -> None:
    failed = ExecutionResult(status="FAILED", execution_summary="s", report_brief="r", error_message="tool down")
    partial = ExecutionResult(status="PARTIAL", execution_summary="s", report_brief="r")
    assert (failed.error_message, partial.error_message) == ("tool down", None)


def test_execution_status_must_be_known() -> None:
    payload = {"status": "DONE", "execution_summary": "s", "report_brief": "r"}
    assert _errors(ExecutionResult, payload) == [("status", "Input should be 'SUCCESS', 'PARTIAL' or 'FAILED'")]


def test_organization_result_dumps_whole() -> None:
    result = OrganizationResult.model_validate_json('{"assistant_text":"现在是 20:00。","response_metadata":{"n":1}}')
    assert result.model_dump() == {"assistant_text": "现在是 20:00。", "response_metadata": {"n": 1}}


def test_organization_result_rejects_empty_and_blank_text() -> None:
    assert _errors(OrganizationResult, {"assistant_text": ""}) == [
        ("assistant_text", "String should have at least 1 character")
    ]
    assert _errors(OrganizationResult, {"assistant_text": " \n "}) == [
        ("", "Value error, assistant_text must not be blank")
    ]


def test_schema_titles_and_streaming_field_order() -> None:
    # The demo model keys on the titles; the runner streams assistant_text, so it must come early.
    assert {stage: model.model_json_schema()["title"] for stage, model in STAGE_CONTRACTS.items()} == {
        "intent": "IntentResult",
        "execution": "ExecutionResult",
        "organization": "OrganizationResult",
    }
    assert list(IntentResult.model_json_schema()["properties"]) == [
        "route",
        "assistant_text",
        "intent_summary",
        "execution_brief",
        "safety_flags",
    ]
    assert list(OrganizationResult.model_json_schema()["properties"]) == ["assistant_text", "response_metadata"]
