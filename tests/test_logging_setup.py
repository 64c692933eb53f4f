"""The service's log set-up: one JSON line per record on stdout, and ERROR lines that are ours to act on."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from agent_runtime.logging_setup import configure_logging


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    crewai = logging.getLogger("crewai.flow.runtime")
    filters = crewai.filters[:]
    try:
        yield
    finally:
        root.handlers[:], crewai.filters[:] = handlers, filters
        root.setLevel(level)


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_crewais_step_errors_are_debug_lines_and_other_errors_stay(
    restored_logging: None, capsys: pytest.CaptureFixture[str], level: str
) -> None:
    configure_logging(level)
    crewai = logging.getLogger("crewai.flow.runtime")
    crewai.error("Error executing listener call_llm_and_parse: stage 'intent': the model call was cancelled")
    crewai.error("something else went wrong")

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = [("ERROR", "something else went wrong")]
    if level == "DEBUG":
        step = "Error executing listener call_llm_and_parse: stage 'intent': the model call was cancelled"
        expected.insert(0, ("DEBUG", step))
    assert [(line["level"], line["msg"]) for line in lines] == expected
