"""crewai_env's two speed-ups keep CrewAI's behaviour, and fail loudly when an upgrade moves what they wrap.

- Tool schemas: the cached function is the one CrewAI's callers use, returns what CrewAI's own returns, and
  hands out copies (callers edit them).
- Listener conditions: a flow with plain, and, or and router listeners runs exactly the methods that it
  runs with CrewAI's own `_condition_met`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from agent_runtime.engine.flow.crewai import env as crewai_env

_CREWAI_DATA = Path(tempfile.gettempdir()) / f"agent-runtime-crewai-tests-{os.getpid()}"
crewai_env.load_crewai(_CREWAI_DATA)
atexit.register(shutil.rmtree, _CREWAI_DATA, ignore_errors=True)

import crewai.flow.runtime as flow_runtime  # noqa: E402
import crewai.tools.structured_tool as structured_tool  # noqa: E402
import crewai.utilities.agent_utils as agent_utils  # noqa: E402
import crewai.utilities.pydantic_schema_utils as schema_utils  # noqa: E402
from crewai.flow.flow import Flow, and_, listen, or_, router, start  # noqa: E402


class Arguments(BaseModel):
    expression: str = Field(description="what to compute")
    precision: int | None = None


def test_tool_schemas_come_from_the_cache_as_crewais_own_and_as_copies() -> None:
    original = schema_utils.generate_model_description
    assert agent_utils.generate_model_description is structured_tool.generate_model_description
    assert agent_utils.generate_model_description is not original, "the cache is not installed (CrewAI moved it?)"

    for strip in (True, False):
        first = agent_utils.generate_model_description(Arguments, strip_null_types=strip)
        assert first == original(Arguments, strip_null_types=strip)
        first["json_schema"]["schema"].pop("title", None)  # as convert_tools_to_openai_schema does
        assert agent_utils.generate_model_description(Arguments, strip_null_types=strip) == original(
            Arguments, strip_null_types=strip
        )


class Trail(Flow[dict[str, Any]]):
    """Plain, and, or and router listeners; each method records its name in the flow's state."""

    def _mark(self, name: str) -> None:
        self.state.setdefault("trail", []).append(name)

    @start()
    def begin(self) -> None:
        self._mark("begin")

    @listen(begin)
    def left(self) -> None:
        self._mark("left")

    @listen(begin)
    def right(self) -> None:
        self._mark("right")

    @listen(and_(left, right))
    def joined(self) -> None:
        self._mark("joined")

    @listen(or_(left, "never"))
    def either(self) -> None:
        self._mark("either")

    @router(joined)
    def choose(self) -> str:
        self._mark("choose")
        return "chosen"

    @listen("chosen")
    def after_route(self) -> None:
        self._mark("after_route")

    @listen("never")
    def unreachable(self) -> None:
        self._mark("unreachable")


@pytest.fixture
def crewais_own_conditions() -> Iterator[None]:
    patched = flow_runtime.Flow._condition_met
    original = patched.__wrapped__
    assert original.__qualname__ == "Flow._condition_met"
    flow_runtime.Flow._condition_met = original
    try:
        yield
    finally:
        flow_runtime.Flow._condition_met = patched


async def _trail() -> list[str]:
    flow = Trail()
    await flow.kickoff_async()
    trail: list[str] = flow.state["trail"]
    return trail


async def test_listeners_fire_as_with_crewais_own_condition_check(crewais_own_conditions: None) -> None:
    expected = await _trail()
    assert sorted(expected) == sorted(["begin", "left", "right", "joined", "either", "choose", "after_route"])


async def test_listeners_fire_the_same_with_the_speed_up() -> None:
    assert flow_runtime.Flow._condition_met.__qualname__.endswith("met_only_by_its_own_events")
    assert sorted(await _trail()) == sorted(["begin", "left", "right", "joined", "either", "choose", "after_route"])
