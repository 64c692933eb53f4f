"""uvicorn's server, told to drain the runs the moment the shutdown signal arrives.

On SIGTERM/SIGINT uvicorn closes the listening sockets, waits up to `timeout_graceful_shutdown` for open
connections to finish, cancels what is left, and only then runs the lifespan shutdown. A run's SSE stream is
one of those connections: if the runs were only told in the lifespan shutdown, their streams would already
be cut, with no terminal event (seen: 10 of 10 clients). So the signal starts `RunService.drain` at once:
new runs get 503 `shutting_down`, runs in flight get SHUTDOWN_GRACE_SECONDS, the rest end with RUN_ERROR
`run_interrupted`, and their streams close after that event. uvicorn's own wait is set longer than the drain.

The listening sockets stay open while the runs drain: closed at once (uvicorn's way), a client that came
during a drain had its connection refused, which a load balancer or client can only read as "down", not "try
elsewhere". Open, every new request gets a JSON 503 `shutting_down` with `Retry-After` and a closed connection
(api/app.py, `shed_requests`); uvicorn's shutdown (listener closed, connections waited for) begins once the
drain is over, at once when no run was in flight. A second signal that forces the exit stops that wait too.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Generator
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

if TYPE_CHECKING:
    from agent_runtime.settings import Settings

# The drain's own bound after the grace: cancelled runs record their failure (one statement each).
DRAIN_MARGIN_SECONDS = 10
# Under `uv run`, a terminal's Ctrl-C reaches the server twice: directly, and forwarded by uv a moment later.
# uvicorn reads a second SIGINT as "force exit" (no lifespan shutdown: a traceback, PostgreSQL stopped from a
# cancelled task); a copy this close to the first is the same Ctrl-C. A later one still forces the exit.
SAME_CTRL_C_SECONDS = 0.5


def graceful_shutdown_seconds(shutdown_grace_seconds: float) -> int:
    """uvicorn's `timeout_graceful_shutdown` (whole seconds): the drain plus its margin."""
    return math.ceil(shutdown_grace_seconds) + DRAIN_MARGIN_SECONDS


class DrainingServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        on_shutdown_signal: Callable[[], None],
        on_started: Callable[[], None] | None = None,
        until_drained: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(config)
        self._on_shutdown_signal = on_shutdown_signal
        self._on_started = on_started
        self._until_drained = until_drained
        self._first_signal_at: float | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._on_started is not None:
            self._on_started()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._until_drained is not None:
            started = time.monotonic()
            drained = asyncio.ensure_future(self._until_drained())
            while not drained.done() and not self.force_exit:
                await asyncio.wait({drained}, timeout=0.1)
            if not drained.done():
                drained.cancel()
            # The stop's bound stays what it was when the drain ran beside uvicorn's wait (workers.py kills a
            # worker past it): uvicorn waits for its connections only for what is left of it, a second at least
            # (the streams of the drained runs end right after their terminal events).
            total = self.config.timeout_graceful_shutdown
            if total is not None:
                left = total - (time.monotonic() - started)
                self.config.timeout_graceful_shutdown = max(1, math.ceil(left))
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self._first_signal_at is not None and now - self._first_signal_at < SAME_CTRL_C_SECONDS:
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


def run_server(
    settings: Settings,
    *,
    sockets: list[socket.socket] | None = None,
    worker: int | None = None,
    on_started: Callable[[], None] | None = None,
) -> None:
    """One server process: `serve` itself, or one of its WORKERS on the parent's socket (`on_started` tells
    the parent that its start-up completed)."""
    from agent_runtime.api.app import create_app
    from agent_runtime.api.transport import uvicorn_limits
    from agent_runtime.logging_setup import configure_logging
    from agent_runtime.observability.tracing import configure_tracing

    configure_logging(settings.log_level, worker=worker)
    configure_tracing(settings)
    # SIGHUP reloads the tools once the lifespan has opened them (api/reload_signal.py); until then it must not end
    # the process, which is what it does by default.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # SIGINT/SIGTERM first drain the runs (api/server.py: every open stream ends with a terminal event), then
    # uvicorn runs the lifespan shutdown, which closes the pool and stops the embedded PostgreSQL; nothing may
    # rely on atexit hooks.
    app = create_app(settings, serve_once_warm=worker is not None)

    def drain() -> None:
        engine = getattr(app.state, "engine", None)
        if engine is not None:
            engine.runs.request_drain()

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=graceful_shutdown_seconds(settings.shutdown_grace_seconds),
        **uvicorn_limits(settings),  # header size and deadline, keep-alive, concurrency ceiling
    )

    async def until_drained() -> None:
        engine = getattr(app.state, "engine", None)
        if engine is not None:
            await engine.runs.until_drained()

    server = DrainingServer(config, on_shutdown_signal=drain, on_started=on_started, until_drained=until_drained)
    server.run(sockets=sockets)
