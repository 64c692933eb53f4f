"""Every Prometheus metric of the service, and the small functions the rest of the code records them with.

Conventions (https://prometheus.io/docs/practices/naming/): one `agent_runtime_` prefix, the unit in the
name (`_seconds`, `_tokens`, `_cny`), `_total` on counters, and only bounded label values: a route
template (never the raw path), a model id from the settings, a tool name from the registry (anything
else is `unknown`), a stage name, an outcome or an error code from our own code set. Never a user,
session, run or request id: those belong on trace spans and log lines.

The metrics live in prometheus-client's default registry (with its process and GC collectors), which
the library guards with its own locks: recording is safe from any thread (CrewAI's workers included).
"""

from __future__ import annotations

from decimal import Decimal

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from agent_runtime.engine.billing.models import CostBreakdown

# Seconds. HTTP answers are milliseconds, except event streams (a whole run); model calls and runs are
# seconds to minutes (RUN_TIMEOUT_SECONDS is 300 by default).
_FAST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_SLOW_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# Event-loop lag: the targets are tens of milliseconds at p99 (docs/benchmarks.md, "Load"), so resolve around them.
_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

UNKNOWN = "unknown"

HTTP_REQUESTS = Counter(
    "agent_runtime_http_requests",
    "HTTP requests answered, by method, route template and status code.",
    ["method", "route", "status"],
)
HTTP_DURATION = Histogram(
    "agent_runtime_http_request_duration_seconds",
    "Time from receiving an HTTP request to the end of its response (a run's event stream: the whole run).",
    ["method", "route"],
    buckets=_FAST_BUCKETS,
)

RUNS_STARTED = Counter("agent_runtime_runs_started", "Agent runs started (accepted and handed to the flow).")
RUNS_FINISHED = Counter(
    "agent_runtime_runs_finished",
    "Agent runs finished here, by outcome (completed, cancelled by the client, failed, handed_over to another replica"
    " at a drain) and error code (empty unless failed).",
    ["outcome", "error_code"],
)
RUNS_TAKEN_OVER = Counter(
    "agent_runtime_runs_taken_over",
    "Runs of a process that stopped renewing its lease, taken over by this one, by where they went on from: start"
    " (no step was stored: the turn again) or intent (the decided intent, then the stored tool calls and results).",
    ["resumed_from"],
)
RUNS_LOST = Counter(
    "agent_runtime_runs_lost",
    "Runs this process's sweep ended with run_lost: their process stopped renewing the lease and no replica went on"
    " with them (RUN_MAX_TAKEOVERS reached, takeovers off, or unclaimed for a whole lease).",
)
RUN_DURATION = Histogram(
    "agent_runtime_run_duration_seconds",
    "Time from a run's start to its end, by outcome.",
    ["outcome"],
    buckets=_SLOW_BUCKETS,
)
RUN_TIME_TO_FIRST_TOKEN = Histogram(
    "agent_runtime_run_time_to_first_token_seconds",
    "Time from a run's start to the first streamed token of its answer.",
    buckets=_SLOW_BUCKETS,
)
STAGE_DURATION = Histogram(
    "agent_runtime_stage_duration_seconds",
    "Time a flow stage took (its model calls and tools), by stage.",
    ["stage"],
    buckets=_SLOW_BUCKETS,
)
ADMISSION_REFUSALS = Counter(
    "agent_runtime_admission_refusals",
    "Runs refused before they started, by reason: the error code the client got (server_busy, shutting_down,"
    " too_many_runs, rate_limited, budget_exceeded).",
    ["reason"],
)
RUNS_IN_FLIGHT = Gauge("agent_runtime_runs_in_flight", "Runs executing in this process now.")

MODEL_CALLS = Counter(
    "agent_runtime_model_calls",
    "Model calls (retries included in one call), by model and outcome (ok, or the error code).",
    ["model", "outcome"],
)
MODEL_FALLBACKS = Counter(
    "agent_runtime_model_fallbacks",
    "Model calls answered by a fallback (config/models.yaml) after their model kept refusing them, by the model"
    " asked and the model that answered (`none` when the whole chain failed).",
    ["model", "fallback"],
)
MODEL_DURATION = Histogram(
    "agent_runtime_model_call_duration_seconds",
    "Time of one model call, retries and back-off included, by model.",
    ["model"],
    buckets=_SLOW_BUCKETS,
)
MODEL_TIME_TO_FIRST_TOKEN = Histogram(
    "agent_runtime_model_time_to_first_token_seconds",
    "Time from sending a streamed model call to its first text piece, by model.",
    ["model"],
    buckets=_SLOW_BUCKETS,
)
MODEL_TOKENS = Counter(
    "agent_runtime_model_tokens",
    "Tokens of model calls, by model and type: input (all prompt tokens), cached_input (the prompt-cache hits"
    " among them), output.",
    ["model", "type"],
)
MODEL_COST = Counter(
    "agent_runtime_model_cost_cny",
    "What model calls cost in CNY (the same figures as the stored rows), by model.",
    ["model"],
)

TOOL_CALLS = Counter(
    "agent_runtime_tool_calls",
    "Tool calls, by tool and outcome (ok, error, invalid_arguments, timeout, internal_error, unknown_tool).",
    ["tool", "outcome"],
)
TOOL_DURATION = Histogram(
    "agent_runtime_tool_call_duration_seconds", "Time of one tool call, by tool.", ["tool"], buckets=_FAST_BUCKETS
)

EVENT_LOOP_LAG = Histogram(
    "agent_runtime_event_loop_lag_seconds",
    "How late the event loop woke a sampling timer: time it spent not serving other work.",
    buckets=_LAG_BUCKETS,
)
GC_PAUSE = Histogram(
    "agent_runtime_gc_pause_seconds",
    "How long one collection of CPython's cyclic garbage collector stopped every thread, by generation"
    " (2 is a full collection).",
    ["generation"],
    buckets=_LAG_BUCKETS,
)
DB_POOL_CONNECTIONS = Gauge(
    "agent_runtime_db_pool_connections", "Database pool connections, by state (in_use, idle).", ["state"]
)
DB_POOL_MAX = Gauge("agent_runtime_db_pool_max_connections", "The database pool's size limit.")
DB_POOL_WAITING = Gauge(
    "agent_runtime_db_pool_waiting_requests", "Acquires waiting for a free database connection (pool exhausted)."
)


def http_request(method: str, route: str, status: int, seconds: float) -> None:
    HTTP_REQUESTS.labels(method, route, str(status)).inc()
    HTTP_DURATION.labels(method, route).observe(seconds)


def run_started() -> None:
    RUNS_STARTED.inc()


def run_finished(seconds: float, *, outcome: str, error_code: str | None = None) -> None:
    RUNS_FINISHED.labels(outcome, error_code or "").inc()
    RUN_DURATION.labels(outcome).observe(seconds)


def run_taken_over(resumed_from: str) -> None:
    RUNS_TAKEN_OVER.labels(resumed_from).inc()


def runs_lost(count: int) -> None:
    RUNS_LOST.inc(count)


def runs_in_flight(count: int) -> None:
    """The admission's count of runs holding a slot in this process (engine/runs/admission.py)."""
    RUNS_IN_FLIGHT.set(count)


def run_first_token(seconds: float) -> None:
    RUN_TIME_TO_FIRST_TOKEN.observe(seconds)


def stage_finished(stage: str, seconds: float) -> None:
    STAGE_DURATION.labels(stage).observe(seconds)


def admission_refused(reason: str) -> None:
    ADMISSION_REFUSALS.labels(reason).inc()


def model_call(model: str, seconds: float, *, cost: CostBreakdown | None = None, error_code: str | None = None) -> None:
    """One finished model call: its outcome and latency, and on success its tokens and cost."""
    MODEL_CALLS.labels(model, error_code or "ok").inc()
    MODEL_DURATION.labels(model).observe(seconds)
    if cost is None:
        return
    MODEL_TOKENS.labels(model, "input").inc(cost.input_tokens)
    MODEL_TOKENS.labels(model, "cached_input").inc(cost.cache_hit_tokens or 0)
    MODEL_TOKENS.labels(model, "output").inc(cost.output_tokens)
    if cost.cost > Decimal(0):
        # A float is exact enough for a rate: the stored Decimal stays the figure to bill from.
        MODEL_COST.labels(model).inc(float(cost.cost))


def model_fallback(model: str, fallback: str | None) -> None:
    MODEL_FALLBACKS.labels(model, fallback or "none").inc()


def model_first_token(model: str, seconds: float) -> None:
    MODEL_TIME_TO_FIRST_TOKEN.labels(model).observe(seconds)


def tool_call(tool: str, outcome: str, seconds: float) -> None:
    TOOL_CALLS.labels(tool, outcome).inc()
    TOOL_DURATION.labels(tool).observe(seconds)


def event_loop_lag(seconds: float) -> None:
    EVENT_LOOP_LAG.observe(seconds)


def gc_pause(generation: int, seconds: float) -> None:
    GC_PAUSE.labels(str(generation)).observe(seconds)


def db_pool(*, in_use: int, idle: int, max_size: int, waiting: int) -> None:
    DB_POOL_CONNECTIONS.labels("in_use").set(in_use)
    DB_POOL_CONNECTIONS.labels("idle").set(idle)
    DB_POOL_MAX.set(max_size)
    DB_POOL_WAITING.set(waiting)


def exposition() -> bytes:
    """The registry in Prometheus' text format (served at GET /metrics)."""
    return bytes(generate_latest(REGISTRY))


__all__ = ["CONTENT_TYPE_LATEST", "UNKNOWN", "exposition"]
