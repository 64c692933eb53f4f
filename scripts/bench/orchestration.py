"""What the official CrewAI `Flow` costs as the orchestrator of our native stages, on the app's event loop.

    uv run python scripts/bench/orchestration.py [--runs 200] [--concurrency 200] [--latency 0.5] [--batches 3]

Paths compared, each in its own subprocess (CrewAI's process-wide state cannot leak between them):
- flow:   `engine.flow.turn.run_turn`, the production path: `AgentFlow.kickoff_async()` (`@start` intent,
          `@router`, `@listen` execution and organization) on the caller's loop, each step awaiting `run_stage`.
- direct: the same `AgentFlow` steps awaited one after the other by hand (no kickoff): the stages' own cost,
          so `flow - direct` is the Flow's.
Both use the same fake `call_model` (no network; an optional `--latency` before each answer) and the real tools.

Columns:
- full / short ms: CPU time (all threads, `time.process_time`) per turn of the full route with one calculator call
  (4 model calls) / of a DIRECT_EXECUTION turn (1 model call), median and p90 of `--runs` sequential turns.
- hand-offs: jobs that reach a thread pool per full turn (`asyncio.to_thread` and `loop.run_in_executor` send them to
  the loop's default executor; the service's runs the `Flow`'s bookkeeping inline), over the sequential turns.
- lag p50/p99/max ms: how late a 10 ms ticker on the loop fires while `--concurrency` full turns run at once, the
  model answering after `--latency` s (`--batches` times); `wall s`: the median batch (ideal: 4 x latency). The
  ticker alone first: the machine's own noise, which is in every lag number too.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from uuid import UUID

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

PATHS = ("flow", "direct")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = asyncio.run(_measure(args.child, args.runs, args.concurrency, args.latency, args.batches))
        print(json.dumps(result))
        return
    rows = []
    for path in args.paths.split(","):
        command = [sys.executable, __file__, "--child", path, "--runs", str(args.runs)]
        command += ["--concurrency", str(args.concurrency), "--latency", str(args.latency)]
        command += ["--batches", str(args.batches)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{path}: child failed")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    _print_table(rows, args)


def _print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"runs={args.runs} concurrency={args.concurrency} batches={args.batches} latency={args.latency}s")
    print(f"(ideal batch wall: 4 model calls x latency = {4 * args.latency:.2f}s)")
    header = (
        f"{'path':<6} {'full ms':>7} {'p90':>5} {'short ms':>8} {'p90':>5} {'hand-offs':>9} | "
        f"{'lag p50':>7} {'p99':>5} {'max':>5} {'wall s':>6}"
    )
    print(header)
    print("-" * len(header))
    idle = ", ".join(f"{row['path']} p99 {row['idle']['p99']:.1f} / max {row['idle']['max']:.1f}" for row in rows)
    print(f"loop lag ms with no turn at all (the machine's own noise): {idle}")
    for row in rows:
        full, short = row["full"], row["short"]
        cpu = f"{full[0]:>7.2f} {full[1]:>5.2f} {short[0]:>8.2f} {short[1]:>5.2f} {row['hand_offs']:>9.1f}"
        for index, lag in enumerate(row["lag"]):
            prefix = f"{row['path']:<6} {cpu}" if index == 0 else " " * (7 + len(cpu))
            print(f"{prefix} | {lag['p50']:>7.1f} {lag['p99']:>5.1f} {lag['max']:>5.1f} {lag['wall']:>6.2f}")


# -- child process ----------------------------------------------------------------------------------


async def _measure(path: str, runs: int, concurrency: int, latency: float, batches: int) -> dict[str, Any]:
    from agent_runtime.engine.flow.turn import is_agent_bookkeeping, load_agent
    from agent_runtime.engine.loop_executor import install

    data = Path(tempfile.mkdtemp(prefix="agent-runtime-bench-orchestration-"))
    atexit.register(shutil.rmtree, data, ignore_errors=True)
    load_agent(data)
    turn = _turns(path)
    loop = asyncio.get_running_loop()
    install(loop, (is_agent_bookkeeping,))  # as the service does at start-up (the model is fake here)
    hand_offs = _count_hand_offs()
    for full in (True, False, True):  # warm-up: imports, caches, first allocations
        await turn(full, 0.0)
    hand_offs.clear()
    full_ms: list[float] = []
    short_ms: list[float] = []
    full_hand_offs = 0
    for _ in range(runs):
        for full, samples in ((True, full_ms), (False, short_ms)):
            hand_offs.clear()
            started = time.process_time()
            await turn(full, 0.0)
            samples.append((time.process_time() - started) * 1000)
            full_hand_offs += hand_offs.full if full else 0
    per_full_turn = full_hand_offs / runs
    idle = await _lag_while(asyncio.sleep(1.0))
    lags = []
    for _ in range(batches):
        began = time.perf_counter()
        lag = await _lag_while(asyncio.gather(*(turn(True, latency) for _ in range(concurrency))))
        lags.append({**lag, "wall": time.perf_counter() - began})
    return {
        "path": path,
        "full": _summary(full_ms),
        "short": _summary(short_ms),
        "hand_offs": per_full_turn,
        "idle": _lag_summary(idle),
        "lag": [{**_lag_summary(lag["samples"]), "wall": lag["wall"]} for lag in lags],
    }


class _HandOffs:
    def __init__(self) -> None:
        self.full = 0

    def clear(self) -> None:
        self.full = 0


def _count_hand_offs() -> _HandOffs:
    """Jobs that reach a thread pool's queue (what the service's default executor runs inline is not one)."""
    counter = _HandOffs()
    original = ThreadPoolExecutor.submit

    def counting(self: ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        counter.full += 1
        return original(self, fn, *args, **kwargs)

    ThreadPoolExecutor.submit = counting  # type: ignore[method-assign,assignment]
    return counter


def _turns(path: str) -> Any:
    from agent_runtime.engine.conversation.chat_messages import AssistantMessage, UserMessage
    from agent_runtime.engine.conversation.metadata import ToolCallSpec
    from agent_runtime.engine.flow.contracts import ExecutionResult, IntentResult, OrganizationResult
    from agent_runtime.engine.flow.crewai.flow import AgentFlow, AgentFlowState, FlowDeps
    from agent_runtime.engine.flow.model_call import ModelCall, ModelReply
    from agent_runtime.engine.flow.prompt import build_global_system_prompt
    from agent_runtime.engine.flow.template_files import load_flow_templates
    from agent_runtime.engine.flow.tools import engine_tools
    from agent_runtime.engine.flow.turn import AgentConfig, TurnInput, TurnPorts, run_turn
    from agent_runtime.engine.profiles.models import ProfileSettingsV2, UserAgentContext
    from agent_runtime.resources import default_config_dir

    templates = load_flow_templates(default_config_dir() / "crewai")
    user = UserAgentContext(user_id=UUID(int=7), username="mia", bio="likes maths", settings=ProfileSettingsV2())
    system_prompt = build_global_system_prompt(user, templates)
    history = [m for i in range(10) for m in (UserMessage(content=f"q{i}"), AssistantMessage(content=f"a{i}"))]
    needs = IntentResult(route="NEEDS_EXECUTION", intent_summary="add", execution_brief="Compute 17 + 25.")
    direct = IntentResult(route="DIRECT_EXECUTION", assistant_text="Hello!", intent_summary="greeting")
    executed = ExecutionResult(status="SUCCESS", execution_summary="42", execution_data={"r": "42"}, report_brief="42")
    organized = OrganizationResult(assistant_text="17 + 25 is 42.")
    call = ToolCallSpec(id="call_1", name="calculator", arguments='{"expression": "17 + 25"}')

    class Bio:
        async def set_bio(self, ctx: Any, bio: str) -> str:
            raise AssertionError("not granted without approval")

    tools = engine_tools(Bio())
    config = AgentConfig(templates=templates)

    def model(full: bool, latency: float) -> Any:
        async def call_model(request: ModelCall) -> ModelReply:
            if latency:
                await asyncio.sleep(latency)
            if request.stage == "intent":
                return ModelReply(content=(needs if full else direct).model_dump_json())
            if request.stage == "execution":
                done = any(m.get("role") == "tool" for m in request.messages)
                return ModelReply(content=executed.model_dump_json()) if done else ModelReply(tool_calls=[call])
            return ModelReply(content=organized.model_dump_json())

        return call_model

    def turn_input() -> TurnInput:
        return TurnInput(system_prompt=system_prompt, history=history, user_input="What is 17 + 25?", ai_language="en")

    async def with_flow(full: bool, latency: float) -> None:
        ports = TurnPorts(call_model=model(full, latency), on_tool_result=None, tools=tools, user=user)
        await run_turn(turn_input(), ports, config)

    async def by_hand(full: bool, latency: float) -> None:
        from agent_runtime.engine.conversation.convert import to_wire

        given = turn_input()
        state = AgentFlowState(
            system_prompt=given.system_prompt,
            history=[dict(to_wire(m)) for m in given.history],
            user_input=given.user_input,
            ai_language=given.ai_language,
        )
        deps = FlowDeps(call_model=model(full, latency), templates=templates, user_context=user, tool_registry=tools)
        flow = AgentFlow.for_turn(state, deps)
        await flow.intent()
        if await flow.route_intent() == "DIRECT_EXECUTION":
            await flow.direct_answer()
        else:
            await flow.execution()
            await flow.organization()

    return with_flow if path == "flow" else by_hand


async def _lag_while(work: Any) -> dict[str, Any]:
    samples: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            planned = time.perf_counter() + 0.01
            await asyncio.sleep(0.01)
            samples.append(max(0.0, (time.perf_counter() - planned) * 1000))

    tick = asyncio.create_task(ticker())
    try:
        await work
    finally:
        stop.set()
        await tick
    return {"samples": samples}


def _summary(values: list[float]) -> list[float]:
    ordered = sorted(values)
    return [statistics.median(ordered), ordered[int(len(ordered) * 0.9) - 1]]


def _lag_summary(samples: Any) -> dict[str, float]:
    values = sorted(samples["samples"] if isinstance(samples, dict) else samples) or [0.0]
    return {"p50": statistics.median(values), "p99": values[int(len(values) * 0.99) - 1], "max": values[-1]}


if __name__ == "__main__":
    main()
