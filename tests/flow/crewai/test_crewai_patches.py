"""Each reach into CrewAI's private API (src/agent_runtime/engine/flow/crewai/PATCHES.md) is still where we reach.

A reach that misses after an upgrade mostly fails silently (an attribute set that nothing reads any more, a
wrapper nothing calls), so these tests read CrewAI's own code: the names we replace are defined with the
signature we wrap, and CrewAI's callers still go through them. Behaviour is pinned by the tests the table names.
"""

from __future__ import annotations

import atexit
import inspect
import os
import shutil
import tempfile
from pathlib import Path

from agent_runtime.engine.flow.crewai import env as crewai_env

_CREWAI_DATA = Path(tempfile.gettempdir()) / f"agent-runtime-crewai-patches-{os.getpid()}"
crewai_env.load_crewai(_CREWAI_DATA)
atexit.register(shutil.rmtree, _CREWAI_DATA, ignore_errors=True)

import crewai.flow.runtime as flow_runtime  # noqa: E402
import crewai.llms.base_llm as base_llm  # noqa: E402
import crewai.tools.structured_tool as structured_tool  # noqa: E402
import crewai.utilities.agent_utils as agent_utils  # noqa: E402
import crewai_core.user_data as user_data  # noqa: E402
from crewai.agents.agent_executor import AgentExecutor  # noqa: E402
from crewai.tools import BaseTool  # noqa: E402

from agent_runtime.engine.flow.crewai.flow import AgentFlow  # noqa: E402
from agent_runtime.engine.flow.crewai.llm import delegating_llm_class  # noqa: E402


def _parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_condition_met_is_wrapped_with_its_signature_and_still_called_by_the_flow() -> None:
    wrapped = flow_runtime.Flow._condition_met
    original = wrapped.__wrapped__
    assert _parameters(original) == ["self", "condition", "trigger_method", "subscription_key"]
    assert _parameters(flow_runtime._iter_condition_events) == ["condition"]
    assert "self._condition_met(" in inspect.getsource(flow_runtime.Flow)


def test_the_executor_state_class_is_what_flow_construction_reads() -> None:
    assert issubclass(AgentExecutor._initial_state_t, flow_runtime.FlowState)
    assert "state_type = self._initial_state_t" in inspect.getsource(flow_runtime.Flow)


def test_tool_schemas_are_read_through_the_module_globals_we_replace() -> None:
    for module in (agent_utils, structured_tool):
        cached = vars(module)["generate_model_description"]
        assert cached.__qualname__.endswith("cached"), module.__name__
        assert "generate_model_description(" in inspect.getsource(module), module.__name__


def test_the_flow_skips_crewais_auto_memory_through_the_flag_it_reads() -> None:
    assert AgentFlow.__private_attributes__["_skip_auto_memory"].default is True
    assert 'getattr(self, "_skip_auto_memory", False)' in inspect.getsource(flow_runtime.Flow)


def test_the_rate_limit_marker_is_the_one_base_llm_skips() -> None:
    assert '_wrap_call_method("call")' in inspect.getsource(base_llm.BaseLLM.__init_subclass__)
    assert '"_crewai_rate_limit_wrapped"' in inspect.getsource(base_llm.BaseLLM._wrap_call_method)
    llm_class = delegating_llm_class()
    assert llm_class.call._crewai_rate_limit_wrapped is True
    assert llm_class.acall._crewai_rate_limit_wrapped is True


def test_tracing_is_declined_with_the_keys_crewai_reads() -> None:
    assert user_data.has_user_declined_tracing()
    source = inspect.getsource(user_data.has_user_declined_tracing)
    assert '"first_execution_done"' in source and '"trace_consent"' in source


def test_the_token_estimate_we_override_has_base_llms_signature() -> None:
    ours = delegating_llm_class().get_input_tokens_count
    assert _parameters(ours) == _parameters(base_llm.BaseLLM.get_input_tokens_count)


def test_the_tool_argument_validation_we_repeat_is_the_one_base_tool_runs() -> None:
    assert _parameters(BaseTool._validate_kwargs) == ["self", "kwargs"]
    assert "kwargs = self._validate_kwargs(kwargs)" in inspect.getsource(BaseTool.run)
