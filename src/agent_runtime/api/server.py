"""uvicorn's server, told to drain the runs the moment the shutdown signal arrives.

On SIGTERM/SIGINT uvicorn closes the listening sockets, waits up to `timeout_graceful_shutdown` for open
connections to finish, cancels what is left, and only then runs the lifespan shutdown. A run's SSE stream is
one of those connections: if the runs were only told in the lifespan shutdown, their streams would already
be cut, with no terminal event (seen: 10 of 10 clients). So the signal starts `RunService.drain` at once:
new runs get 503 `shutting_down`, runs in flight get SHUTDOWN_GRACE_SECONDS, the rest end with RUN_ERROR
`run_interrupted`, and their streams close after that event. uvicorn's own wait is set longer than the drain.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Generator
from types import FrameType

import uvicorn

# The drain's own bound after the grace: cancelled runs record their failure (one statement each).
DRAIN_MARGIN_SECONDS = 10
# Under `uv run`, a terminal's Ctrl-C reaches the server twice: directly, and forwarded by uv a moment later.
# uvicorn reads a second SIGINT as "force exit" (no lifespan shutdown: a traceback, PostgreSQL stopped from a
# cancelled task); a copy this close to the first is the same Ctrl-C. A later one still forces the exit.
_SAME_CTRL_C_SECONDS = 0.5


def graceful_shutdown_seconds(shutdown_grace_seconds: float) -> int:
    """uvicorn's `timeout_graceful_shutdown` (whole seconds): the drain plus its margin."""
    return math.ceil(shutdown_grace_seconds) + DRAIN_MARGIN_SECONDS


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_shutdown_signal: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_shutdown_signal = on_shutdown_signal
        self._first_signal_at: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self._first_signal_at is not None and now - self._first_signal_at < _SAME_CTRL_C_SECONDS:
            return
        first = not self.should_exit
        super().handle_exit(sig, frame)
        if first:
            self._first_signal_at = now
            self._on_shutdown_signal()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        with super().capture_signals():
            yield
            # Shut down cleanly: exit 0. uvicorn re-raises the signal here, which makes a drained, orderly stop
            # look exactly like an unhandled kill (-15) to whoever watches the exit status.
            self._captured_signals.clear()
