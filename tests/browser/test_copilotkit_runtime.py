"""CopilotKit's Node runtime in front of /v1/agui, as a user's own app puts it (runtime.mjs): an HttpAgent per app,
each request a runtime process of its own (a page reload reaching a restarted runtime, or another instance).
Runs go through the runtime's `run`; a page that reconnects calls its `connect`, which the HydratingRunner answers
with our hydrate: the stored thread, the interrupt it waits for, or its live run."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from uuid import uuid4

import httpx
from tests.browser.conftest import Live, NodeScript, run_node

from agent_runtime.engine.auth import mint_token
from agent_runtime.settings import Settings

BIO = "Kayaker from Lofoten"
WITHIN = 120


class Thread:
    """One user's session on the live server, and the runtime requests made on it."""

    def __init__(self, live: Live, token: str, session_id: str) -> None:
        self.live, self.token, self.id = live, token, session_id

    def request(self, endpoint: str, **fields: Any) -> dict[str, Any]:
        aguiUrl = f"{self.live.server.base_url}/v1/agui"
        return {"aguiUrl": aguiUrl, "token": self.token, "threadId": self.id, "endpoint": endpoint, **fields}

    async def runtime(self, endpoint: str, **fields: Any) -> list[dict[str, Any]]:
        """The events of one request to the runtime (a 200 event stream)."""
        output = await run_node("runtime.mjs", self.request(endpoint, **fields), within=WITHIN)
        assert output["status"] == 200 and output["contentType"].startswith("text/event-stream"), output
        events: list[dict[str, Any]] = output["events"]
        return events

    async def get(self, path: str) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(base_url=self.live.server.base_url, headers=headers, timeout=10) as client:
            response = await client.get(path)
        assert response.status_code == 200, response.text
        return response.json()


async def new_thread(live: Live, settings: Settings) -> Thread:
    token = mint_token(settings, uuid4())
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=live.server.base_url, headers=headers, timeout=10) as client:
        session = (await client.post("/v1/sessions", json={})).json()
    return Thread(live, token, session["id"])


async def next_event(script: NodeScript) -> dict[str, Any]:
    """The next event runtime.mjs prints as it arrives (libraries may print other lines)."""
    while not (line := await script.next_line(within=WITHIN)).startswith('{"event":'):
        pass
    event: dict[str, Any] = json.loads(line)["event"]
    return event


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def test_a_run_through_the_runtime_streams_our_answer(live: Live, settings: Settings) -> None:
    thread = await new_thread(live, settings)
    events = await thread.runtime("run", text="hi")
    assert types(events)[0] == "RUN_STARTED" and types(events)[-1] == "RUN_FINISHED", types(events)
    assert 'You said: "hi"' in text(events), events
    stored = (await thread.get(f"/v1/sessions/{thread.id}/messages"))["items"]
    assert [m["role"] for m in stored] == ["user", "assistant"] and stored[1]["content"] == text(events), stored


async def test_a_reconnecting_page_gets_the_interrupt_again_and_resumes_it(live: Live, settings: Settings) -> None:
    thread = await new_thread(live, settings)
    asked = await thread.runtime("run", text=f"set my bio to: {BIO}")
    (interrupt,) = asked[-1]["outcome"]["interrupts"]

    connected = await thread.runtime("connect")
    # Nothing ran: the stored thread, its state and the same interrupt, under a run id that is no run's.
    assert types(connected) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"], connected
    assert connected[-1]["outcome"] == {"type": "interrupt", "interrupts": [interrupt]}
    assert connected[2]["snapshot"]["agentRuntime"] == {
        "runId": asked[0]["runId"],
        "status": "interrupted",
        "stage": None,
        "route": None,
        "pendingToolCallIds": [],
        "interrupts": [interrupt["id"]],
    }
    messages = connected[1]["messages"]
    assert [(m["role"], m.get("content")) for m in messages] == [("user", f"set my bio to: {BIO}"), ("assistant", None)]
    assert [c["id"] for c in messages[1]["toolCalls"]] == [interrupt["toolCallId"]]
    (run,) = (await thread.get(f"/v1/sessions/{thread.id}/runs"))["items"]
    assert run["id"] == asked[0]["runId"], run

    approval = {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}
    resumed = await thread.runtime("run", messages=messages, resume=[approval])
    assert [e["toolCallId"] for e in resumed if e["type"] == "TOOL_CALL_RESULT"] == [interrupt["toolCallId"]]
    # A plain success carries no outcome (absent = success).
    assert resumed[-1]["type"] == "RUN_FINISHED" and "outcome" not in resumed[-1], resumed[-1]
    assert (await thread.get("/v1/profile"))["bio"] == BIO

    finished = await thread.runtime("connect")
    assert types(finished) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"], finished
    assert "outcome" not in finished[-1], finished[-1]
    assert finished[2]["snapshot"]["agentRuntime"]["status"] == "completed"
    stored = (await thread.get(f"/v1/sessions/{thread.id}/messages"))["items"]
    assert [(m["role"], m.get("content") or "") for m in finished[1]["messages"]] == [
        (m["role"], m["content"] or "") for m in stored
    ]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"], stored


async def test_a_reconnecting_page_joins_the_live_run(live: Live, settings: Settings) -> None:
    thread = await new_thread(live, settings)
    hold = live.stub.hold_replies()
    try:
        page = await NodeScript.start("runtime.mjs", thread.request("run", text="hi"))
        assert (await next_event(page))["type"] == "RUN_STARTED"
        reloaded = await NodeScript.start("runtime.mjs", thread.request("connect"))
        joined = [await next_event(reloaded) for _ in range(3)]
        # The live run from its start, as any replica serves it: its own id, the thread, its state.
        assert types(joined) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"], joined
        assert joined[2]["snapshot"]["agentRuntime"]["status"] == "running", joined
    finally:
        await hold.release()
    first, second = await page.result(within=WITHIN), await reloaded.result(within=WITHIN)
    assert second["events"][0]["runId"] == first["events"][0]["runId"]
    assert 'You said: "hi"' in text(first["events"]) and text(second["events"]) == text(first["events"])
    assert types(second["events"])[-1] == "RUN_FINISHED" and second["events"][-1] == first["events"][-1]
    (run,) = (await thread.get(f"/v1/sessions/{thread.id}/runs"))["items"]
    assert run["id"] == first["events"][0]["runId"] and run["status"] == "completed", run


async def test_a_page_connecting_to_a_thread_we_do_not_know_gets_nothing_and_a_bad_token_an_error(
    live: Live, settings: Settings
) -> None:
    thread = await new_thread(live, settings)
    # Someone else's thread, or one never created: nothing to connect to, as CopilotKit's own runner answers.
    stranger = Thread(live, mint_token(settings, uuid4()), thread.id)
    assert await stranger.runtime("connect") == []
    assert await Thread(live, thread.token, str(uuid4())).runtime("connect") == []

    expired = Thread(live, mint_token(settings, uuid4(), ttl=timedelta(seconds=-60)), thread.id)
    # Not dropped silently, as the runtime's connect endpoint drops errors: our 401, said in the stream.
    refused = {"type": "RUN_ERROR", "code": "unauthorized", "message": "token expired"}
    assert await expired.runtime("connect") == [refused]
