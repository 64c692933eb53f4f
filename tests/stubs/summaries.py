"""The test stub's answer to the chat memory's summary task: extractive and deterministic, the demo model's own
(engine/llm/demo/extractive.py), so that what a conversation remembers is measurable offline."""

from __future__ import annotations

import json

from tests.stubs.deepseek_stub import RecordedRequest, Responder, StubReply, content_text

from agent_runtime.engine.llm.demo.extractive import summary_of_request

SUMMARY_SCHEMA_TITLE = '"title":"ConversationSummary"'


def summary_reply(request: RecordedRequest) -> StubReply | None:
    """The summary the task asks for, or None for any other request (the task names its contract's schema)."""
    users = [content_text(m.get("content")) for m in request.messages if m.get("role") == "user"]
    if not users or SUMMARY_SCHEMA_TITLE not in users[-1]:
        return None
    return StubReply(content=json.dumps({"summary": summary_of_request(users)}, ensure_ascii=False))


def summarising(responder: Responder) -> Responder:
    """`responder`, with the summary task answered extractively."""

    def respond(request: RecordedRequest) -> StubReply:
        return summary_reply(request) or responder(request)

    return respond
