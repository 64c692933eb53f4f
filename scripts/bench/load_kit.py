"""Shared parts of the load benchmarks (load.py, event_log.py): processes, sessions, one AG-UI run over SSE,
percentiles (what is read from the servers while they run is in load_probes.py).

Adapted from the peer's `loadgen.py` (../shared/bench/peer-pydantic-ai/): the same run checks (RUN_FINISHED
last, no RUN_ERROR, one TOOL_CALL_RESULT on a full run, a first answer token) and the same 16-message history
for the peer, the one our memory window holds after four full turns (load.py warms our sessions to it).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

ROOT = Path(__file__).resolve().parents[2]
BENCH_SECRET = "bench-secret-for-agent-runtime-0123456789abcdef"
ADMIN_URL = os.environ.get("BENCH_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
FULL_TEXT = "[bench:full] what is 12*7?"
ANSWER = "12 × 7 = 84. Anything else you want to work out?"
TOOL_RESULT = '{"expression":"12*7","result":"84"}'
# The chat-memory summary is off (it is on by default with a real model): the stub knows no summary request, and
# the peer is sent a fixed 16-message history without one; our window then holds 10-20 messages (cache-aware cut).
# Our per-user quotas are off (0 = no limit) so that the benchmark measures the run path, not the quotas: each
# session belongs to its own user anyway, but a closed loop starts more than 20 runs a minute on one session.
LAG_PROBE = ROOT / "scripts/bench/lag_probe"
OURS_ENV = {
    "LLM_MODEL": "deepseek/deepseek-flash",
    "DEEPSEEK_API_KEY": "sk-perf",
    "JWT_SECRET": BENCH_SECRET,
    "MEMORY_SUMMARY": "false",
    "MAX_RUNS_PER_USER_PER_MINUTE": "0",
    "USER_DAILY_BUDGET_CNY": "0",
    "USER_MONTHLY_BUDGET_CNY": "0",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
}


# A first-person fact in a turn (engine/user_memories: worth extracting); load_stub.py's extraction keeps it.
REMEMBER_TEXT = "[bench:remember] I live in Berlin."


def text_for(latency: float) -> str:
    """A full-route question; the load stub reads the model latency from the marker."""
    return f"{FULL_TEXT} [lat={latency}]"


def stop_on_sigterm() -> None:
    """SIGTERM ends the benchmark like Ctrl-C, so that its `finally` stops the servers and drops the database."""

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def loadavg() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> int:
    """The first of `count` consecutive free ports."""
    while True:
        first = free_port()
        try:
            for port in range(first + 1, first + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 100 values is the 99th smallest)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass
class Server:
    name: str
    base: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    app_name: str = ""  # our PostgreSQL application_name, to find the server's database backends
    # Where the lag probe (scripts/bench/lag_probe/) of each of its processes writes: `<lag_file>.<pid>`.
    lag_file: Path | None = None
    # Our /metrics, one per worker process (WORKERS > 1: METRICS_PORT + i); empty: base + /metrics.
    metrics: list[str] = field(default_factory=list)

    @property
    def metrics_urls(self) -> list[str]:
        return self.metrics or [self.base + "/metrics"]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(60)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


# `taskset -c PIN` for the servers under test (not the stub): both then get at most one and the same core.
PIN: str | None = None
# Server processes of ours (WORKERS) and of the peer (uvicorn --workers).
WORKERS = 1
PEER_WORKERS = 1


def _launch(name: str, argv: list[str], env: dict[str, str], workdir: Path, port: int, pin: bool = True) -> Server:
    """`pin` (a server, not a helper process): also taskset (--pin) and the loop-lag probe."""
    log_path = workdir / f"{name}.log"
    lag_file = workdir / f"lag-{name}" if pin else None
    if lag_file is not None:
        python_path = [str(LAG_PROBE), *filter(None, [env.get("PYTHONPATH")])]
        env = {**env, "PYTHONPATH": os.pathsep.join(python_path), "BENCH_LAG_FILE": str(lag_file)}
    if PIN is not None and pin:
        argv = ["taskset", "-c", PIN, *argv]
    with log_path.open("wb") as log:
        # A session of its own: with the kernel's autogroup scheduling each server then competes with the other
        # agents' processes as one group, whatever its thread count (ours has dozens, the peer one busy thread).
        popen = subprocess.Popen(
            argv, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Server(name, f"http://127.0.0.1:{port}", popen, log_path, lag_file=lag_file)


async def wait_ready(server: Server, path: str, *, within: float = 180, in_a_row: int = 1) -> None:
    deadline = time.monotonic() + within
    ready = 0
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if server.popen.poll() is not None:
                raise SystemExit(f"{server.name} exited:\n{server.log_path.read_text()[-3000:]}")
            try:
                async with http.get(server.base + path) as r:
                    ready = ready + 1 if r.status == 200 else 0
                    if ready >= in_a_row:
                        return
            except aiohttp.ClientError:
                ready = 0
            await asyncio.sleep(0.2 if ready == 0 else 0.01)
    raise SystemExit(f"{server.name} not ready in {within} s:\n{server.log_path.read_text()[-3000:]}")


async def start_stub(workdir: Path) -> Server:
    port = free_port()
    argv = [sys.executable, str(ROOT / "scripts/bench/load_stub.py"), "--port", str(port)]
    stub = _launch("stub", argv, dict(os.environ), workdir, port, pin=False)
    for _ in range(300):
        if "stub ready" in stub.log_path.read_text():
            return stub
        await asyncio.sleep(0.1)
    raise SystemExit(f"stub did not start:\n{stub.log_path.read_text()}")


async def start_ours(
    name: str, database_url: str, stub: Server, workdir: Path, env: dict[str, str], argv: list[str] | None = None
) -> Server:
    """`agent-runtime serve` as a deployment runs it (the CLI, uvicorn in-process; `argv` replaces the CLI), cwd
    outside the checkout so no `.env` applies; ready once its background CrewAI/LiteLLM import is done."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "DEEPSEEK", "OPENAI", "MAX_"))}
    full_env.update(OURS_ENV, LLM_API_BASE=stub.base, PORT=str(port), DATA_DIR=str(workdir / f"data-{name}"))
    full_env["DATABASE_URL"] = f"{database_url}?application_name={name}"
    metrics: list[str] = []
    if WORKERS > 1:
        metrics_port = free_ports(WORKERS)
        full_env.update(WORKERS=str(WORKERS), METRICS_PORT=str(metrics_port))
        metrics = [f"http://127.0.0.1:{metrics_port + i}/metrics" for i in range(WORKERS)]
    full_env.update(env)
    server = _launch(name, argv or [sys.executable, "-m", "agent_runtime.cli", "serve"], full_env, workdir, port)
    server.app_name = name
    server.metrics = metrics
    # Readiness answers 200 once CrewAI/LiteLLM are loaded. With workers, the port answers once the first one is
    # warm (each accepts only then, and ends its start-up then): the log's start-up lines say when all are.
    await wait_ready(server, "/health/ready")
    deadline = time.monotonic() + 180
    while server.log_path.read_text(errors="replace").count("Application startup complete.") < WORKERS:
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: not every worker started in 180 s:\n{server.log_path.read_text()[-3000:]}")
        await asyncio.sleep(0.2)
    return server


async def start_peer(peer_dir: Path, venv: Path, stub: Server, workdir: Path) -> Server:
    """The peer as its README starts it: uvicorn in a scratch venv, the app from the peer's directory."""
    port = free_port()
    env = {**os.environ, "STUB_URL": stub.base}
    argv = [str(venv / "bin/uvicorn"), "peer_app:app", "--app-dir", str(peer_dir), "--port", str(port)]
    if PEER_WORKERS > 1:
        argv += ["--workers", str(PEER_WORKERS)]
    server = _launch("peer", argv, env, workdir, port)
    await wait_ready(server, "/health")
    return server


async def start_floor(kind: str, workdir: Path) -> Server:
    """A server that refuses every request with ours's 429 and does nothing else (refusal_floor.py)."""
    port = free_port()
    argv = [sys.executable, str(ROOT / "scripts/bench/refusal_floor.py"), "--port", str(port), "--kind", kind]
    server = _launch(f"floor-{kind}", argv, dict(os.environ), workdir, port)
    await wait_ready(server, "/health")
    return server


async def create_database() -> str:
    name = f"agent_runtime_bench_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(ADMIN_URL)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return ADMIN_URL.rsplit("/", 1)[0] + "/" + name


async def drop_database(url: str) -> None:
    conn = await asyncpg.connect(ADMIN_URL)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    finally:
        await conn.close()


@dataclass
class Session:
    id: str
    token: str = ""


@dataclass
class Run:
    status: int  # HTTP status
    ok: bool
    wall: float
    ttfe: float = -1.0  # first SSE event
    ttft: float = -1.0  # first answer token (TEXT_MESSAGE_CONTENT)
    error: str = ""
    last_seq_id: str = ""  # our `id:` of the last frame seen
    run_id: str = ""
    session_id: str = ""


def peer_history() -> list[dict[str, Any]]:
    """Four full turns (16 messages): what our memory window holds after four warm-up runs of a session."""
    msgs: list[dict[str, Any]] = []
    for i in range(4):
        cid = f"call_{i:024d}"
        call = {
            "id": cid,
            "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "12*7"}'},
        }
        msgs += [
            {"id": f"h{i}u", "role": "user", "content": text_for(0.0)},
            {"id": f"h{i}a", "role": "assistant", "toolCalls": [call]},
            {"id": f"h{i}t", "role": "tool", "content": TOOL_RESULT, "toolCallId": cid},
            {"id": f"h{i}b", "role": "assistant", "content": ANSWER},
        ]
    return msgs


@dataclass
class Target:
    name: str
    server: Server
    peer: bool = False
    sessions: list[Session] = field(default_factory=list)
    stub: Server | None = None  # its CPU is counted with the target's
    completed: int = 0  # runs that passed every check

    async def ensure_sessions(self, http: aiohttp.ClientSession, n: int) -> list[Session]:
        """n sessions, each its own user (ours); the peer has no sessions: thread ids."""
        from datetime import timedelta

        from agent_runtime.engine.auth import mint_token
        from agent_runtime.settings import Settings

        settings = Settings(_env_file=None, jwt_secret=BENCH_SECRET)
        while len(self.sessions) < n:
            if self.peer:
                self.sessions.append(Session(str(uuid.uuid4())))
                continue
            token = mint_token(settings, uuid.uuid4(), ttl=timedelta(hours=12))
            async with http.post(f"{self.server.base}/v1/sessions", headers=_auth(token), json={}) as r:
                self.sessions.append(Session((await r.json())["id"], token))
        return self.sessions[:n]

    async def run(self, http: aiohttp.ClientSession, session: Session, text: str) -> Run:
        if self.peer:
            msgs = [*peer_history(), {"id": uuid.uuid4().hex, "role": "user", "content": text}]
            body: dict[str, Any] = {
                "threadId": session.id,
                "runId": str(uuid.uuid4()),
                "state": {},
                "messages": msgs,
                "tools": [],
                "context": [],
                "forwardedProps": {},
            }
            url, headers = f"{self.server.base}/agui", {"accept": "text/event-stream"}
        else:
            url, headers = f"{self.server.base}/v1/sessions/{session.id}/runs", _auth(session.token)
            body = {"message": text}
        run = await read_stream(http.post(url, headers=headers, json=body), full=True)
        run.session_id = session.id
        self.completed += run.ok
        return run


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class _Frames:
    """What a stream's frames said so far."""

    run: Run
    full: bool
    tools: int = 0
    answer_step: bool = False
    finished: bool = False

    def feed(self, raw: bytes, now: float) -> bool:
        """Takes one `data:` line; True when the stream failed (RUN_ERROR)."""
        run = self.run
        if run.ttfe < 0:
            run.ttfe = now
        if b'"type":"TEXT_MESSAGE_CONTENT"' in raw:
            if run.ttft < 0 and (self.answer_step or not self.full):
                run.ttft = now
        elif b'"type":"RUN_STARTED"' in raw:
            run.run_id = json.loads(raw[5:])["runId"]
        elif b'"type":"STEP_STARTED"' in raw and b'"organization"' in raw:
            self.answer_step = True
        elif b'"type":"TOOL_CALL_RESULT"' in raw:
            self.tools += 1
        elif b'"type":"RUN_ERROR"' in raw:
            run.wall, run.error = now, raw.decode()[:300]
            return True
        elif b'"type":"RUN_FINISHED"' in raw:
            self.finished = True
        return False

    def check(self) -> None:
        run = self.run
        if not self.finished or self.tools != (1 if self.full else 0) or run.ttft < 0:
            run.error = f"bad run: finished={self.finished} tools={self.tools} ttft={run.ttft}"
        else:
            run.ok = True


async def read_stream(request: Any, *, full: bool) -> Run:
    """One AG-UI stream, checked."""
    t0 = time.perf_counter()
    frames = _Frames(Run(0, False, 0.0), full)
    run = frames.run
    try:
        async with request as r:
            run.status = r.status
            if r.status != 200:
                run.wall, run.error = time.perf_counter() - t0, f"HTTP {r.status}: {(await r.text())[:200]}"
                return run
            async for raw in r.content:
                if raw.startswith(b"id:"):
                    run.last_seq_id = raw[3:].strip().decode()
                elif raw.startswith(b"data:") and frames.feed(raw, time.perf_counter() - t0):
                    return run
    except (aiohttp.ClientError, TimeoutError) as exc:
        run.wall, run.error = time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"
        return run
    run.wall = time.perf_counter() - t0
    frames.check()
    return run


async def curl_burst(base: str, sessions: list[Session], text: str, workdir: Path) -> list[tuple[int, float]]:
    """Each session's run request, all at once from one curl process: (status, seconds) per request.

    curl does not check the streams (a 200 counts whatever it carried); its point is the 429s' latency with a
    client that costs next to nothing."""
    body = json.dumps({"message": text})
    config = workdir / "burst.curl"
    config.write_text(
        "\nnext\n".join(
            f'url = "{base}/v1/sessions/{s.id}/runs"\nrequest = "POST"\nheader = "Authorization: Bearer {s.token}"\n'
            f'header = "Content-Type: application/json"\ndata = {json.dumps(body)}\noutput = "/dev/null"\n'
            'write-out = "%{http_code} %{time_total}\\n"'
            for s in sessions
        )
    )
    argv = ["curl", "-s", "-Z", "--parallel-max", str(len(sessions)), "--parallel-immediate", "-K", str(config)]
    process = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out, _ = await process.communicate()
    return [(int(code), float(seconds)) for code, seconds in (line.split() for line in out.decode().splitlines())]


def connector() -> aiohttp.TCPConnector:
    # keep-alive shorter than uvicorn's 5 s, so the client never reuses a connection the server is closing
    return aiohttp.TCPConnector(limit=0, keepalive_timeout=3)


def client(timeout: float = 180) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=connector(), timeout=aiohttp.ClientTimeout(total=timeout))
