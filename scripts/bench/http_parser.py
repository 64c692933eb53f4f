"""Server CPU per request of `/health/live` with uvicorn's h11 parser (what `serve` runs: the only one whose
header size uvicorn can bound) against httptools (uvicorn's default), both serving our app side by side.

Each server runs in its own process; the CPU is read from /proc before and after each batch, so the client's
work is not in it. Rounds alternate between the two, so machine noise hits both alike.

    DATABASE_URL=postgresql://... uv run python scripts/bench/http_parser.py [--requests 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

import httpx

PARSERS = ("h11", "httptools")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start(parser: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    command = [sys.executable, "-m", "uvicorn", "agent_runtime.api.app:create_app", "--factory", "--http", parser]
    proc = subprocess.Popen([*command, "--port", str(port), "--log-level", "warning", "--no-access-log"], env=env)
    base_url = f"http://127.0.0.1:{port}"
    # Readiness answers 503 until the background CrewAI/LiteLLM import is done: pause after a 503 too, up to a
    # deadline (300 tries without a pause gave up once 300 503s had come back, however fast they came).
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{parser} server exited with status {proc.returncode}")
        try:
            if httpx.get(f"{base_url}/health/ready").status_code == 200:
                return proc, base_url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{parser} server not ready in 180 s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-seconds", type=float, default=20, help="for the background CrewAI import")
    args = parser.parse_args()
    if "DATABASE_URL" not in os.environ:
        raise SystemExit("set DATABASE_URL (a database the servers may migrate)")
    env = {**os.environ, "JWT_SECRET": "bench-secret-0123456789abcdef0123456789", "LOG_LEVEL": "WARNING"}
    servers = {name: _start(name, env) for name in PARSERS}
    try:
        time.sleep(args.warmup_seconds)
        micros: dict[str, list[float]] = {name: [] for name in PARSERS}
        for _ in range(args.rounds):
            for name, (proc, base_url) in servers.items():
                with httpx.Client(base_url=base_url) as client:
                    before = _cpu_seconds(proc.pid)
                    for _ in range(args.requests):
                        client.get("/health/live")
                    micros[name].append((_cpu_seconds(proc.pid) - before) / args.requests * 1e6)
        for name, values in micros.items():
            print(f"{name:10} server CPU per request (µs): {[round(v) for v in values]}")
        print("h11 / httptools:", [round(a / b, 2) for a, b in zip(micros["h11"], micros["httptools"], strict=True)])
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
