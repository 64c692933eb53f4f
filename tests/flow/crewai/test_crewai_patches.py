"""Each reach into CrewAI's private API (src/agent_runtime/engine/flow/crewai/PATCHES.md) is still where we reach.

A reach that misses after an upgrade mostly fails silently (an attribute set that nothing reads any more), so these
tests read CrewAI's own code: the names we set are the ones CrewAI's code reads. Behaviour is pinned by the tests the
table names.
"""

from __future__ import annotations

import atexit
import inspect
import os
import shutil
import tempfile
from pathlib import Path

from agent_runtime.engine.flow.turn import load_agent

_CREWAI_DATA = Path(tempfile.gettempdir()) / f"agent-runtime-crewai-patches-{os.getpid()}"
load_agent(_CREWAI_DATA)
atexit.register(shutil.rmtree, _CREWAI_DATA, ignore_errors=True)

import crewai.events.event_listener as event_listener  # noqa: E402
import crewai.flow.runtime as flow_runtime  # noqa: E402
import crewai_core.token_manager as token_manager_module  # noqa: E402
import crewai_core.user_data as user_data  # noqa: E402
from crewai.events.event_bus import crewai_event_bus  # noqa: E402
from crewai.events.types.env_events import CCEnvEvent, CodexEnvEvent, CursorEnvEvent, DefaultEnvEvent  # noqa: E402
from crewai.events.types.flow_events import FlowFailedEvent, FlowFinishedEvent, FlowStartedEvent  # noqa: E402
from crewai.tools import BaseTool  # noqa: E402
from crewai_core.token_manager import TokenManager  # noqa: E402

from agent_runtime.engine.flow.crewai import env as crewai_env  # noqa: E402
from agent_runtime.engine.flow.crewai.flow import AgentFlow  # noqa: E402


def test_the_flow_skips_crewais_auto_memory_through_the_flag_it_reads() -> None:
    assert AgentFlow.__private_attributes__["_skip_auto_memory"].default is True
    assert 'getattr(self, "_skip_auto_memory", False)' in inspect.getsource(flow_runtime.Flow)


def test_tracing_is_declined_with_the_keys_crewai_reads() -> None:
    assert user_data.has_user_declined_tracing()
    source = inspect.getsource(user_data.has_user_declined_tracing)
    assert '"first_execution_done"' in source and '"trace_consent"' in source


def test_an_async_tool_is_one_that_overrides_the_arun_base_tool_awaits() -> None:
    assert "return await self._arun(*args, **kwargs)" in inspect.getsource(BaseTool.arun)
    assert "NotImplementedError" in inspect.getsource(BaseTool._arun)


def test_the_flows_bookkeeping_jobs_are_the_ones_kickoff_sends_to_a_thread() -> None:
    # Row 7: bookkeeping.is_bookkeeping recognises these by module and qualified name.
    source = inspect.getsource(flow_runtime)
    for call in (
        "await asyncio.to_thread(self._persist_method_completion, method_name)",
        "await asyncio.to_thread(self._drain_memory_writes)",
        "await asyncio.to_thread(crewai_event_bus.flush)",
    ):
        assert call in source, call
    assert flow_runtime.Flow._persist_method_completion.__qualname__ == "Flow._persist_method_completion"
    assert flow_runtime.Flow._drain_memory_writes.__qualname__ == "Flow._drain_memory_writes"
    bus = flow_runtime.crewai_event_bus
    assert (type(bus).flush.__module__, type(bus).flush.__qualname__) == (
        "crewai.events.event_bus",
        "CrewAIEventsBus.flush",
    )


def test_crewais_listener_handles_the_flow_events_a_kickoff_always_emits() -> None:
    # Row 8: CrewAI's listener registers these (telemetry and console), a kickoff emits them even for a suppressed
    # flow, and after our import none of the listener's handlers of them is left.
    listener = inspect.getsource(event_listener.EventListener.setup_listeners)
    events = (FlowStartedEvent, FlowFinishedEvent, FlowFailedEvent, DefaultEnvEvent, CCEnvEvent, CodexEnvEvent)
    for event in (*events, CursorEnvEvent):
        assert f"@crewai_event_bus.on({event.__name__})" in listener
        handlers = crewai_event_bus._sync_handlers.get(event, frozenset())
        assert not [h for h in handlers if h.__qualname__.startswith("EventListener.")], event
    kickoff = inspect.getsource(flow_runtime.Flow)
    assert "FlowStartedEvent(" in kickoff and "FlowFinishedEvent(" in kickoff


def test_crewai_keeps_its_credentials_key_in_the_file_and_length_we_publish() -> None:
    source = inspect.getsource(TokenManager._get_or_create_key)
    assert f'key_filename: str = "{crewai_env.CREDENTIALS_KEY_FILE}"' in source
    assert "len(key) == _FERNET_KEY_LENGTH" in source
    assert token_manager_module._FERNET_KEY_LENGTH == crewai_env.FERNET_KEY_LENGTH
