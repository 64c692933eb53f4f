"""Patience under overload: 429 storms through the whole service, with the shipped delays and several wait budgets.

    uv run python scripts/bench/overload.py [--database-url URL] [--budgets 0,2,60] [--answer-seconds 1.0]

A stub of DeepSeek takes 2 requests at a time per model (DeepSeek limits requests in flight per account and model,
quick_start/rate_limit) and answers 429 without Retry-After beyond; each answer takes `--answer-seconds`. Storms: 10
runs at once, twice; 10 (5x the limit); 20 (10x). Each run is a new user's first turn (one model call), through HTTP,
the run service, the flow and LiteLLM (`tests/support/overload_storm.py`), on a throwaway database. Per storm and
LLM_OVERLOAD_WAIT_SECONDS: runs finished, calls the fallback (deepseek-v4-pro) answered, CNY at peak and the
fallback's share of it, 429s, wall time and the slowest run. LLM_MAX_RETRIES, LLM_RETRY_BASE_SECONDS and
LLM_RETRY_MAX_SECONDS are the shipped ones (2 / 0.5 / 8).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.conftest import TEST_JWT_SECRET  # noqa: E402
from tests.support.database import PgServer, create_database, drop_database, find_server  # noqa: E402
from tests.support.overload_storm import HEADER, storm  # noqa: E402

from agent_runtime.db.migrations import apply_migrations  # noqa: E402
from agent_runtime.settings import Settings  # noqa: E402

STORMS = {"10 at once, twice": [10, 10], "5x (10 at once)": [10], "10x (20 at once)": [20]}


async def bench(dsn: str, budgets: list[float], answer_seconds: float) -> None:
    settings = Settings(
        _env_file=None,
        environment="test",
        database_url=dsn,
        data_dir=Path(tempfile.mkdtemp(prefix="agent-runtime-bench-overload-")),
        jwt_secret=TEST_JWT_SECRET,
        user_memories_enabled=False,
    )
    print(f"answers take {answer_seconds} s; 2 requests at a time per model\n")
    print(HEADER.replace("| storm |", "| LLM_OVERLOAD_WAIT_SECONDS, storm |"))
    for budget in budgets:
        for label, waves in STORMS.items():
            result = await storm(settings, waves, answer_seconds=answer_seconds, llm_overload_wait_seconds=budget)
            print(result.line(f"{budget:g} s, {label}"), flush=True)


async def main_async(args: argparse.Namespace) -> None:
    server = PgServer(admin_url=args.database_url, embedded=None) if args.database_url else await find_server()
    try:
        name = await create_database(server, prefix="agent_runtime_bench")
        try:
            await apply_migrations(server.url_for(name))
            await bench(server.url_for(name), args.budgets, args.answer_seconds)
        finally:
            await drop_database(server, name)
    finally:
        if server.embedded is not None:
            server.embedded.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="admin URL of the server to create the database on")
    parser.add_argument(
        "--budgets",
        type=lambda text: [float(item) for item in text.split(",")],
        default=[0.0, 2.0, 60.0],
        help="LLM_OVERLOAD_WAIT_SECONDS values (0,2,60)",
    )
    parser.add_argument("--answer-seconds", type=float, default=1.0, help="how long each answer takes (1.0)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
