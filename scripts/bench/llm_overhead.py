"""Per-call latency of LLMClient vs bare litellm.acompletion vs a raw aiohttp POST, against the local stub.

The stub runs in a child process so its CPU time is not charged to the clients being measured. All
variants are measured in the same run, one call of each per round in a shuffled order, so machine noise
and position effects (LiteLLM finishes its logging in background tasks after a call returns) hit them alike.
Overhead is the median of per-round differences to bare LiteLLM, which is far steadier than a difference
of medians on a busy machine. The CPU column is the process CPU within the call (LiteLLM's logging that
finishes in background tasks afterwards is not in it, which flatters the bare-LiteLLM rows).

    uv run python scripts/bench/llm_overhead.py [--rounds 300] [--warmup 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    # Makes `tests.stubs` importable when the script is run by path.
    sys.path.insert(0, str(REPO_ROOT))

import aiohttp  # noqa: E402
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubReply  # noqa: E402

API_KEY = "sk-bench"
ANSWER = "The quick brown fox jumps over the lazy dog. " * 5  # 225 characters
CHUNK_CHARS = 5  # 45 content chunks per streamed answer
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something."}]


def _reply(_: RecordedRequest) -> StubReply:
    return StubReply(content=ANSWER, chunk_chars=CHUNK_CHARS)


def _serve(conn: Connection) -> None:
    async def main() -> None:
        async with DeepSeekStub(api_key=API_KEY, cache_hit_tokens=8, responder=_reply) as stub:
            conn.send(stub.base_url)
            await asyncio.Event().wait()

    asyncio.run(main())


Call = Callable[[], Awaitable[object]]
USAGE = {"include_usage": True}


class _Replay:
    def __init__(self, chunks: list[object]) -> None:
        self._chunks = iter(chunks)

    def __aiter__(self) -> _Replay:
        return self

    async def __anext__(self) -> object:
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None


async def _variants(base_url: str, session: aiohttp.ClientSession) -> dict[str, Call]:
    from agent_runtime.engine.llm import LLMClient, LLMRequest, WireMessage
    from agent_runtime.engine.llm.litellm_import import load_litellm
    from agent_runtime.settings import Settings

    litellm = load_litellm()
    url = f"{base_url}/chat/completions"
    headers = {"Authorization": f"Bearer {API_KEY}"}
    settings = Settings(
        _env_file=None, llm_model="deepseek/deepseek-flash", llm_api_base=base_url, deepseek_api_key=API_KEY
    )
    client = LLMClient(settings)
    request = LLMRequest(messages=[WireMessage.model_validate(m) for m in MESSAGES])
    bare: dict[str, object] = {
        "model": "deepseek/deepseek-flash",
        "messages": MESSAGES,
        "api_key": API_KEY,
        "api_base": base_url,
    }
    bare |= {"num_retries": 0, "max_retries": 0}
    body = {"model": "deepseek-flash", "messages": MESSAGES}

    async def raw_once() -> object:
        async with session.post(url, json=body, headers=headers) as response:
            return json.loads(await response.read())

    async def raw_stream() -> object:
        stream_body = {**body, "stream": True, "stream_options": USAGE}
        async with session.post(url, json=stream_body, headers=headers) as response:
            return [line async for line in response.content if line.startswith(b"data: ")]

    async def litellm_once() -> object:
        return await litellm.acompletion(**bare)

    async def litellm_stream() -> object:
        chunks = await litellm.acompletion(**bare, stream=True, stream_options=USAGE)
        return [chunk async for chunk in chunks]

    async def provider_stream() -> object:
        # What LLMClient reads: the provider's iterator inside LiteLLM's CustomStreamWrapper.
        chunks = await litellm.acompletion(**bare, stream=True, stream_options=USAGE)
        try:
            return [chunk async for chunk in chunks.completion_stream]
        finally:
            await chunks.aclose()

    async def ours_once() -> object:
        return await client.complete(request)

    async def ours_stream() -> object:
        return await client.complete_streaming(request)

    # Our layer alone: LiteLLM's real output for this request, recorded once and replayed without I/O.
    recorded = await litellm.acompletion(**bare)
    recorded_chunks = [c async for c in await litellm.acompletion(**bare, stream=True, stream_options=USAGE)]

    async def replay(**kwargs: object) -> object:
        return _Replay(recorded_chunks) if kwargs.get("stream") else recorded

    layer = LLMClient(settings, acompletion=replay)

    async def layer_once() -> object:
        return await layer.complete(request)

    async def layer_stream() -> object:
        return await layer.complete_streaming(request)

    return {
        "raw aiohttp / non-stream": raw_once,
        "litellm.acompletion / non-stream": litellm_once,
        "LLMClient.complete / non-stream": ours_once,
        "raw aiohttp / stream": raw_stream,
        "litellm.acompletion / stream": litellm_stream,
        "litellm provider iterator / stream": provider_stream,
        "LLMClient.complete_streaming / stream": ours_stream,
        "LLMClient alone, replayed / non-stream": layer_once,
        "LLMClient alone, replayed / stream": layer_stream,
    }


def _p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10)[-1]


@dataclass
class Timings:
    wall: dict[str, list[float]]
    cpu: dict[str, list[float]]


async def _measure(base_url: str, rounds: int, warmup: int) -> Timings:
    async with aiohttp.ClientSession() as session:
        variants = await _variants(base_url, session)
        timings = Timings(wall={name: [] for name in variants}, cpu={name: [] for name in variants})
        order = list(variants)
        shuffle = random.Random(1).shuffle
        for index in range(warmup + rounds):
            shuffle(order)
            for name in order:
                call = variants[name]
                start, cpu_start = time.perf_counter(), time.process_time()
                await call()
                elapsed, cpu = (time.perf_counter() - start) * 1000, (time.process_time() - cpu_start) * 1000
                if index >= warmup:
                    timings.wall[name].append(elapsed)
                    timings.cpu[name].append(cpu)
    return timings


def _print_table(timings: Timings) -> None:
    print(f"{'variant':40} {'median ms':>10} {'p90 ms':>10} {'vs litellm, paired median ms':>29} {'CPU ms median':>14}")
    for name, samples in timings.wall.items():
        baseline = timings.wall[f"litellm.acompletion / {name.split(' / ')[1]}"]
        paired = statistics.median(ours - bare for ours, bare in zip(samples, baseline, strict=True))
        shown = "" if "replayed" in name else f"{paired:+29.3f}"
        cpu = statistics.median(timings.cpu[name])
        print(f"{name:40} {statistics.median(samples):10.3f} {_p90(samples):10.3f} {shown:>29} {cpu:14.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    parent, child = multiprocessing.get_context("spawn").Pipe()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(child,), daemon=True)
    server.start()
    try:
        base_url = parent.recv()
        timings = asyncio.run(_measure(base_url, args.rounds, args.warmup))
    finally:
        server.terminate()
        server.join()
    print(f"{args.rounds} rounds after {args.warmup} warm-up rounds; stub in a separate process, answering at once")
    _print_table(timings)


if __name__ == "__main__":
    main()
