"""A thread that reconnects (a hydrate, docs/api.md "Reconnecting to a thread") through the official client: a
second HttpAgent (another device, or the page reloaded) with the thread's messages but none of the first one's
pending interrupts runs with nothing new. It gets the thread's messages and state and the interrupt again, so
its `runAgent({resume})` approves and the turn goes on; a hydrate of the finished thread then leaves it with the
stored thread. As the current client (1.0) and as CopilotKit's (no protocolVersion; its bundled @ag-ui/core
0.0.59 schemas must accept every hydrate event)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.conformance.harness import (
    Servers,
    assert_accepted,
    assert_messages_match,
    legacy_schema_rejections,
    new_case,
    run_client,
)

from agent_runtime.settings import Settings

BIO_REQUEST = "set my bio to: Kayaker from Lofoten"


@pytest.mark.parametrize(
    ("legacy", "approval"),
    [
        pytest.param(False, {"status": "resolved"}, id="client-1.0"),
        pytest.param(True, {"status": "resolved", "payload": {"approved": True}}, id="copilotkit-legacy"),
    ],
)
async def test_a_reconnecting_client_gets_the_interrupt_again_and_resumes_it(
    servers: Servers, settings: Settings, legacy: bool, approval: dict[str, Any]
) -> None:
    case = await new_case(servers.demo, settings)
    steps: list[dict[str, Any]] = [{}, {"newAgent": True}, {"resume": approval}, {"newAgent": True}]
    extra = {"legacyClient": True} if legacy else {}
    summary = await run_client(servers.demo, case, BIO_REQUEST, steps=steps, state={"theme": "dark"}, **extra)
    suspended, rehydrated, resumed, finished = summary["runs"]

    assert_accepted(suspended, terminal="RUN_FINISHED")
    (interrupt,) = suspended["runFinished"][0]["interrupts"]
    events = assert_accepted(rehydrated, terminal="RUN_FINISHED")
    # Nothing new in the input: no model call, only the thread as it stands.
    assert rehydrated["http"]["requestBody"]["messages"] == suspended["messages"]
    assert [e["type"] for e in events] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert rehydrated["runFinished"][0]["outcome"] == "interrupt"
    assert rehydrated["pendingInterrupts"] == [interrupt]
    assert rehydrated["state"]["theme"] == "dark"
    assert rehydrated["state"]["agentRuntime"]["status"] == "interrupted"
    assert rehydrated["state"]["agentRuntime"]["interrupts"] == [interrupt["id"]]
    # Its MESSAGES_SNAPSHOT, the stored thread, is what the suspended run left the first client with.
    assert rehydrated["messages"] == suspended["messages"]

    resumed_events = assert_accepted(resumed, terminal="RUN_FINISHED")
    assert [e["toolCallId"] for e in resumed_events if e["type"] == "TOOL_CALL_RESULT"] == [interrupt["toolCallId"]]
    assert resumed["pendingInterrupts"] == []

    final_events = assert_accepted(finished, terminal="RUN_FINISHED")
    assert [e["type"] for e in final_events] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert finished["runFinished"][0]["outcome"] == "success" and finished["pendingInterrupts"] == []
    assert finished["state"]["agentRuntime"]["status"] == "completed"
    await assert_messages_match(servers.demo, case, finished)
    if legacy:
        assert await legacy_schema_rejections(events + final_events) == []
