"""`agent-runtime serve` with two benchmark-only probes, chosen by environment (event_log.py starts it):

- BENCH_COUNT_SQL=1: every statement the process sends is counted by kind in a Prometheus counter,
  `bench_sql_statements_total{kind}`, on the server's own /metrics (asyncpg's two ways of sending a statement
  are wrapped, as tests/runs/test_runs_statements.py does).
- BENCH_NO_REPAIR=1: the lease keeper's log repair (RunStore.repair_logs) is off. It ends the logs of finished
  runs that have no terminal event, i.e. every run of a BENCH_EVENT_LOG=off server: left on, any process would
  write those logs after all, during another arm's measurement. A shipped server repairs nothing here.
- BENCH_EVENT_LOG=off: the run event log's database write is a no-op (EventStore.append). The in-memory log
  stays (numbering, each event's JSON, which the SSE frame is made of anyway); what is removed is what the log
  costs in writes: asyncpg's encoding on our side and the INSERT in PostgreSQL. Resume then has no stored log.

    BENCH_COUNT_SQL=1 uv run python scripts/bench/serve_patched.py serve
"""

from __future__ import annotations

import os
import sys
from typing import Any

import asyncpg
from prometheus_client import Counter

from agent_runtime import cli
from agent_runtime.engine.runs.events.log import EventBatch
from agent_runtime.engine.runs.events.store import EventStore
from agent_runtime.engine.runs.ledger.store import RunStore

STATEMENTS = Counter("bench_sql_statements", "SQL statements sent, by kind (benchmark probe).", ["kind"])
# The lease keeper's statements first: the sweep and the log repair insert into agent_run_events too.
_KINDS = (
    ("UPDATE agent_chat_sessions s SET lease_expires_at", "keeper_renewal"),
    ("WITH expired AS", "keeper_sweep"),
    ("WITH incomplete AS", "keeper_log_repair"),
    ("SET events_expired = true", "keeper_events_expiry"),
    ("INSERT INTO agent_run_events", "events"),
    ("INSERT INTO agent_runs", "start"),
    ("UPDATE agent_runs SET status", "finish"),
    ("tail AS (", "window"),
    ("SELECT pending_turn, client_state", "thread"),
    ("INSERT INTO agent_chat_messages", "append"),
    ("FROM agent_run_events", "events_read"),
    ("SELECT status, log_complete", "run_state"),
    ("pg_notify('agent_run_control', 'follow:'", "follow"),
)


def kind_of(sql: str) -> str:
    text = " ".join(sql.split())
    for marker, kind in _KINDS:
        if marker in text:
            return kind
    if "SELECT * FROM ( SELECT" in text and "ORDER BY seq DESC LIMIT" in text:
        return "snapshot"
    return "other: " + text[:60]  # bounded: a server sends a few dozen distinct statements


def count_statements() -> None:
    execute, execute_params = asyncpg.Connection.execute, asyncpg.Connection._execute

    async def counting_execute(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        if not args:  # with arguments it goes through _execute, counted there
            STATEMENTS.labels(kind_of(query)).inc()
        return await execute(self, query, *args, **kwargs)

    async def counting_execute_params(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        STATEMENTS.labels(kind_of(query)).inc()
        return await execute_params(self, query, *args, **kwargs)

    asyncpg.Connection.execute = counting_execute
    asyncpg.Connection._execute = counting_execute_params


async def _no_write(self: EventStore, batch: EventBatch) -> None:
    return None


async def _no_repair(self: RunStore, *, grace_seconds: float) -> int:
    return 0


if __name__ == "__main__":
    if os.environ.get("BENCH_COUNT_SQL") == "1":
        count_statements()
    if os.environ.get("BENCH_NO_REPAIR") == "1":
        RunStore.repair_logs = _no_repair  # type: ignore[method-assign]
    if os.environ.get("BENCH_EVENT_LOG") == "off":
        EventStore.append = _no_write  # type: ignore[method-assign]
    sys.exit(cli.main())
