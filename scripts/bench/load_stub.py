"""OpenAI/DeepSeek-compatible stub for the load benchmarks (ours and the pydantic-ai peer both call it).

Adapted from the peer's `stub.py` (../shared/bench/peer-pydantic-ai/, the stub of issue 9's first table): it
wraps the project's `tests/stubs/deepseek_stub.DeepSeekStub`. The stage is recognised from the last user message:
ours starts with `Stage: <name>` (the intent stage's is the user's turn itself), the peer's names the contract
("matching the IntentResult schema" ...); the route from a marker in the user's turn:
`[bench:full]` -> NEEDS_EXECUTION with one calculator call (12*7), anything else -> DIRECT_EXECUTION.
One change: `[lat=S]` in the user's text sets the delay before each call's first byte (default `--latency`),
so one stub and one server process serve every scenario of a benchmark run.

    uv run python scripts/bench/load_stub.py --port 19401 [--latency 0]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the checkout's tests/stubs

from tests.stubs.deepseek_stub import (  # noqa: E402
    DeepSeekStub,
    RecordedRequest,
    StubReply,
    StubToolCall,
    content_text,
)

from flow import FULL, INTENT_SHORT  # noqa: E402  (the flow benchmark's route marker and greeting reply)

API_KEY = "sk-perf"
_LATENCY = re.compile(r"\[lat=([0-9.]+)\]")
EXPRESSION = "12*7"

INTENT_FULL: dict[str, Any] = {
    "route": "NEEDS_EXECUTION",
    "assistant_text": None,
    "intent_summary": "The user wants 12*7 computed.",
    "execution_brief": "Compute 12*7 with the calculator and report the exact result.",
    "safety_flags": [],
}
EXECUTION = {
    "status": "SUCCESS",
    "execution_summary": "Evaluated 12*7 with the calculator.",
    "execution_data": {"expression": EXPRESSION, "result": "84"},
    "report_brief": "Tell the user the result is 84.",
}
ORGANIZATION = {
    "assistant_text": "12 × 7 = 84. Anything else you want to work out?",
    "response_metadata": {},
}


# The first words of config/crewai/tasks.yaml's memory_extraction task, the system message of an extraction call.
EXTRACTION_MARKER = "You keep a short list of durable facts about the user"


def make_responder(default_latency: float, chunk_chars: int) -> Any:
    def respond(request: RecordedRequest) -> StubReply:
        messages = request.messages
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        task = content_text(messages[last_user].get("content")) if last_user >= 0 else ""
        users = [content_text(m.get("content")) for m in messages if m.get("role") == "user"]
        # Ours: the user's turn is the intent call's last message, a later stage's request starts with `Stage:`.
        turn = next((text for text in reversed(users) if not text.startswith("Stage: ")), "")
        marker = _LATENCY.search(turn)
        delay = float(marker.group(1)) if marker else default_latency
        stage = task.split("\n", 1)[0] if task.startswith("Stage: ") else "Stage: intent"
        if "matching the ExecutionResult schema" in task:
            stage = "Stage: execution"
        elif "matching the OrganizationResult schema" in task:
            stage = "Stage: organization"
        if any(EXTRACTION_MARKER in content_text(m.get("content")) for m in messages if m.get("role") == "system"):
            # Long-term memories' extraction after a turn (ours): the demo question leaves nothing to remember; a turn
            # that says it lives in Berlin (load.py --remember), that.
            remembered = "[bench:remember]" in turn
            operations = [{"action": "add", "fact": "The user lives in Berlin."}] if remembered else []
            return StubReply(content=json.dumps({"operations": operations}), delay_seconds=delay)
        if stage == "Stage: intent":
            content = json.dumps(INTENT_FULL if FULL in turn else INTENT_SHORT)
            return StubReply(content=content, delay_seconds=delay, chunk_chars=chunk_chars)
        if stage == "Stage: execution":
            if any(m.get("role") == "tool" for m in messages[last_user + 1 :]):
                # One chunk when streamed (the peer streams every call; agent-runtime asks this one unstreamed).
                return StubReply(content=json.dumps(EXECUTION), delay_seconds=delay, chunk_chars=100_000)
            arguments = json.dumps({"expression": EXPRESSION})
            call = StubToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name="calculator", arguments=arguments)
            return StubReply(tool_calls=[call], delay_seconds=delay)
        content = json.dumps(ORGANIZATION, ensure_ascii=False)
        return StubReply(content=content, delay_seconds=delay, chunk_chars=chunk_chars)

    return respond


async def serve(port: int, latency: float, chunk_chars: int) -> None:
    stub = DeepSeekStub(api_key=API_KEY, responder=make_responder(latency, chunk_chars))
    stub.requests = collections.deque(maxlen=8)  # type: ignore[assignment]  # bounded: long runs
    await stub.start(port=port)
    print(f"stub ready {stub.base_url} latency={latency}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await stub.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=19401)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each call's first byte")
    parser.add_argument("--chunk-chars", type=int, default=4, help="characters of content per streamed chunk")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.latency, args.chunk_chars))


if __name__ == "__main__":
    main()
