"""Which tool call is running: its idempotency key, `<run id>:<tool call id>`, the same wherever the call runs (a run
taken over by another process runs an idempotent tool again under the same key: engine/runs/takeover/). HTTP tools
send it as `Idempotency-Key`, MCP tools in the call's `_meta`, so a backend can drop a repeat.

A context variable, set around each call by the run's tool set (engine/flow/tools/registry.py): the calls of one
model reply run concurrently, each in its own task, so each sees its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

IDEMPOTENCY_HEADER = "Idempotency-Key"

_KEY: ContextVar[str | None] = ContextVar("tool_call_idempotency_key", default=None)


def idempotency_key() -> str | None:
    """The running tool call's key (None outside a run's tool call, e.g. a tool called from a test)."""
    return _KEY.get()


@contextlib.contextmanager
def tool_call(key: str | None) -> Iterator[None]:
    token = _KEY.set(key)
    try:
        yield
    finally:
        _KEY.reset(token)
