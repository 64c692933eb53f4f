"""CPU and event-loop cost of running the three-stage flow on CrewAI, two ways; prints a table.

    uv run python scripts/bench/crewai_paths.py [--runs 30] [--concurrency 20] [--latency 0.2]

Paths compared (each in its own subprocess, so CrewAI's process-wide state cannot leak between them):
- agent:      `Flow` + `Agent.kickoff_async(messages, response_format=Contract)` per stage, the flow driven
              on the run service's bounded pools (`FlowDeps.threads`, `engine/flow/crewai/threads.py`) -- the
              production module `engine/flow/crewai/flow.py`.
- agent-loop: the same flow driven on the app's event loop (`threads=None`).
- crew:       `Flow` + `Crew.akickoff()` per stage with `Agent` + `Task(output_pydantic=Contract)`, the
              history rendered into the task text (a Task takes no message list), on the app's loop.
Both use the same `DelegatingLLM` with a fake `call_model` (no network) and the same `crewai_env` set-up,
so only CrewAI's own cost is measured. (Detaching CrewAI's idle console/telemetry listeners from its event
bus was tried too: ~2 ms per full flow, not worth reaching into the bus's registry.)

Columns:
- full / short ms: CPU time (all threads, `time.process_time`) per run of a 3-stage flow with one tool call
  (4 model calls) / of a DIRECT_EXECUTION flow (1 model call), median and p90 of `--runs` sequential runs,
  the model answering instantly.
- lag p50/p99/max ms: how late a 10 ms ticker on the event loop fires while `--concurrency` full flows run
  at once (`--batches` times), the model answering after `--latency` s; `wall s` is the median batch's
  duration (ideal: 4 x latency); `threads` is the size of each of the two flow pools (= concurrency, as
  admission control guarantees in the service). The same ticker with no run is printed first: on a shared
  machine the other processes' load shows up there, and in every lag number.
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
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

PATHS = ("agent", "agent-loop", "crew")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval for the runs")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.switch_interval:
            sys.setswitchinterval(args.switch_interval)
        result = asyncio.run(_measure(args.child, args.runs, args.concurrency, args.latency, args.batches))
        print(json.dumps(result))
        return
    rows = []
    for path in args.paths.split(","):
        command = [sys.executable, __file__, "--child", path, "--runs", str(args.runs)]
        command += ["--concurrency", str(args.concurrency), "--latency", str(args.latency)]
        command += ["--batches", str(args.batches)]
        if args.switch_interval:
            command += ["--switch-interval", str(args.switch_interval)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{path}: child failed")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    _print_table(rows, args)


def _print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    switch = args.switch_interval or sys.getswitchinterval()
    print(f"runs={args.runs} concurrency={args.concurrency} batches={args.batches} latency={args.latency}s", end="")
    print(f" switch-interval={switch * 1000:g}ms")
    print(f"(ideal batch wall: 4 model calls x latency = {4 * args.latency:.2f}s)")
    header = (
        f"{'path':<6} {'full ms':>7} {'p90':>5} {'min':>5} {'short ms':>8} {'p90':>5} {'min':>5} | "
        f"{'threads':>7} {'lag p50':>7} {'p99':>5} {'max':>5} {'wall s':>6}"
    )
    print(header)
    print("-" * len(header))
    idle = ", ".join(f"{row['path']} p99 {row['idle']['p99']:.0f} / max {row['idle']['max']:.0f}" for row in rows)
    print(f"loop lag ms with no run at all (the machine's own noise): {idle}")
    for row in rows:
        full, short = row["full"], row["short"]
        for index, lag in enumerate(row["lag"]):
            cpu = f"{full[0]:>7.1f} {full[1]:>5.1f} {full[2]:>5.1f} {short[0]:>8.1f} {short[1]:>5.1f} {short[2]:>5.1f}"
            prefix = f"{row['path']:<6} {cpu}" if index == 0 else " " * (7 + len(cpu))
            lags = f"{lag['p50']:>7.1f} {lag['p99']:>5.0f} {lag['max']:>5.0f} {lag['wall']:>6.2f}"
            print(f"{prefix} | {lag['pool']:>7} {lags}")


# -- child process ----------------------------------------------------------------------------------


async def _measure(path: str, runs: int, concurrency: int, latency: float, batches: int) -> dict[str, Any]:
    from agent_runtime.engine.flow.crewai.env import load_crewai
    from agent_runtime.engine.flow.crewai.threads import FlowThreads

    data_dir = Path(tempfile.mkdtemp(prefix="crewai-bench-"))
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    load_crewai(data_dir)
    run_flow = _runner(path, FlowThreads(concurrency, cpu_slots=1))

    await run_flow("NEEDS_EXECUTION", 0.0)  # warm-up: lazy imports, schema caches, the bus's executor
    await run_flow("DIRECT_EXECUTION", 0.0)
    full = await _cpu_per_run(lambda: run_flow("NEEDS_EXECUTION", 0.0), runs)
    short = await _cpu_per_run(lambda: run_flow("DIRECT_EXECUTION", 0.0), runs)
    idle = await _idle_lag(2.0)
    lag = [await _loop_lag(run_flow, concurrency, latency, batches, concurrency)]
    return {"path": path, "full": full, "short": short, "lag": lag, "idle": idle}


async def _cpu_per_run(run: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.process_time()
        await run()
        samples.append((time.process_time() - started) * 1000)
    samples.sort()
    return [statistics.median(samples), samples[max(0, int(len(samples) * 0.9) - 1)], samples[0]]


async def _idle_lag(seconds: float) -> dict[str, float]:
    """The same ticker with nothing else running: what the machine itself adds (other processes)."""
    lags: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        expected = time.perf_counter() + 0.01
        await asyncio.sleep(0.01)
        lags.append(max(0.0, time.perf_counter() - expected) * 1000)
    lags.sort()
    return {"p99": lags[max(0, int(len(lags) * 0.99) - 1)], "max": lags[-1]}


async def _loop_lag(
    run_flow: Callable[[str, float], Awaitable[object]], concurrency: int, latency: float, batches: int, threads: int
) -> dict[str, Any]:
    lags: list[float] = []
    walls: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        interval = 0.01
        while not stop.is_set():
            expected = time.perf_counter() + interval
            await asyncio.sleep(interval)
            lags.append(max(0.0, time.perf_counter() - expected) * 1000)

    tick = asyncio.create_task(ticker())
    for _ in range(batches):
        started = time.perf_counter()
        await asyncio.gather(*(run_flow("NEEDS_EXECUTION", latency) for _ in range(concurrency)))
        walls.append(time.perf_counter() - started)
    stop.set()
    await tick
    lags.sort()
    return {
        "pool": threads,
        "p50": statistics.median(lags),
        "p99": lags[max(0, int(len(lags) * 0.99) - 1)],
        "max": lags[-1],
        "wall": statistics.median(walls),
    }


def _runner(path: str, threads: Any) -> Callable[[str, float], Awaitable[object]]:
    from agent_runtime.engine.conversation.chat_messages import AssistantMessage, UserMessage
    from agent_runtime.engine.flow.crewai.flow import FlowDeps, build_state, run_agent_flow
    from agent_runtime.engine.flow.prompt import build_global_system_prompt
    from agent_runtime.engine.profiles.models import ProfileSettingsV2, UserAgentContext

    templates = _templates()
    context = UserAgentContext(user_id=uuid.uuid4(), username="bench", bio=None, settings=ProfileSettingsV2())
    history = [
        UserMessage(content=f"earlier question {index}") if index % 2 == 0 else AssistantMessage(content="an answer")
        for index in range(10)
    ]

    async def run(route: str, latency: float) -> object:
        deps = FlowDeps(
            call_model=_fake_model(route, latency),
            model="deepseek/deepseek-flash",
            templates=templates,
            user_context=context,
            threads=threads if path == "agent" else None,
        )
        state = build_state(
            system_prompt=build_global_system_prompt(context, templates),
            history=history,
            user_input="2+2?",
            ai_language="en",
        )
        if path.startswith("agent"):
            return await run_agent_flow(state, deps)
        return await _run_crew_flow(state, deps)

    return run


def _fake_model(route: str, latency: float) -> Any:
    from agent_runtime.engine.conversation.metadata import ToolCallSpec
    from agent_runtime.engine.flow.model_call import ModelCall, ModelReply

    intent = {"route": route, "intent_summary": "add numbers"}
    intent |= {"assistant_text": "4"} if route == "DIRECT_EXECUTION" else {"execution_brief": "compute 2+2"}
    execution = {"status": "SUCCESS", "execution_summary": "2+2=4", "execution_data": {"r": 4}, "report_brief": "4"}

    async def call_model(request: ModelCall) -> ModelReply:
        if latency:
            await asyncio.sleep(latency)
        if request.stage == "intent":
            return ModelReply(content=json.dumps(intent))
        if request.stage == "execution":
            if request.tools and not any(m["role"] == "tool" for m in request.messages):
                return ModelReply(
                    tool_calls=[ToolCallSpec(id="call_1", name="calculator", arguments='{"expression":"2+2"}')]
                )
            return ModelReply(content=json.dumps(execution))
        return ModelReply(content=json.dumps({"assistant_text": "The answer is 4."}))

    return call_model


def _templates() -> Any:
    from agent_runtime.engine.flow.templates import load_flow_templates

    return load_flow_templates(ROOT / "config" / "crewai")


async def _run_crew_flow(state: Any, deps: Any) -> Any:
    return await _crew_flow_class().for_run(state, deps).run()


_CREW_FLOW: Any = None


def _crew_flow_class() -> Any:
    """The same flow with `Crew.akickoff()` per stage (bench only)."""
    global _CREW_FLOW
    if _CREW_FLOW is not None:
        return _CREW_FLOW
    from crewai import Agent, Crew, Task
    from crewai.flow.flow import listen, router, start

    from agent_runtime.engine.flow.contracts import ExecutionResult, IntentResult, OrganizationResult
    from agent_runtime.engine.flow.crewai.flow import AgentFlow
    from agent_runtime.engine.flow.crewai.llm import DelegatingLLM
    from agent_runtime.engine.flow.prompt import build_stage_prompt_payload
    from agent_runtime.engine.flow.templates import ExecutionVariables, IntentVariables, OrganizationVariables

    class CrewStagesFlow(AgentFlow):  # type: ignore[misc,valid-type]
        # Flow steps are collected from the class's own body only, so they are repeated here.
        async def _crew_stage(self, payload: Any, contract: Any) -> Any:
            deps = self._require_deps()
            llm = DelegatingLLM.for_stage(
                deps.call_model, stage=payload.stage, model=deps.model, output_model=contract, inject_schema=False
            )
            agent = Agent(
                role=payload.agent.role,
                goal=payload.agent.goal,
                backstory=payload.agent.backstory,
                llm=llm,
                tools=self._stage_tools(payload.agent.tools),
                respect_context_window=False,
                use_better_compaction=False,
                allow_delegation=False,
                verbose=False,
            )
            history = json.dumps(self.state.history, ensure_ascii=False)
            description = f"{self.state.system_prompt}\n\nConversation so far: {history}\n\n{payload.request}"
            # Task texts are str.format-interpolated with the kickoff inputs: escape the JSON braces.
            description = description.replace("{", "{{").replace("}", "}}")
            task = Task(
                description=description, expected_output="One JSON object.", output_pydantic=contract, agent=agent
            )
            output = await Crew(agents=[agent], tasks=[task], verbose=False).akickoff()
            return output.pydantic

        def _payload(self, stage: str, variables: Any) -> Any:
            templates = self._require_deps().templates
            return build_stage_prompt_payload(stage, templates=templates, variables=variables)

        @start()
        async def intent(self) -> Any:
            variables = IntentVariables(user_input=self.state.user_input, ai_language=self.state.ai_language)
            self.state.intent = await self._crew_stage(self._payload("intent", variables), IntentResult)

        @router(intent)
        async def route_intent(self) -> str:
            self.state.route = self.state.intent.route
            return str(self.state.intent.route)

        @listen("DIRECT_EXECUTION")
        async def direct_answer(self) -> None:
            self.state.assistant_text = self.state.intent.assistant_text

        @listen("NEEDS_EXECUTION")
        async def execution(self) -> None:
            variables = ExecutionVariables(
                user_input=self.state.user_input,
                ai_language=self.state.ai_language,
                intent_summary=self.state.intent.intent_summary,
                execution_brief=self.state.intent.execution_brief,
            )
            self.state.execution = await self._crew_stage(self._payload("execution", variables), ExecutionResult)

        @listen(execution)
        async def organization(self) -> None:
            variables = OrganizationVariables(
                user_input=self.state.user_input,
                ai_language=self.state.ai_language,
                intent_summary=self.state.intent.intent_summary,
                execution_report=self.state.execution,
            )
            self.state.organization = await self._crew_stage(
                self._payload("organization", variables), OrganizationResult
            )
            self.state.assistant_text = self.state.organization.assistant_text

    _CREW_FLOW = CrewStagesFlow
    return _CREW_FLOW


if __name__ == "__main__":
    main()
