"""WORKERS > 1: several server processes on one listening socket, so one service uses every core it is given.

One process runs Python on about one core (the GIL), and a full run is CPU-bound, so a process saturates while a
second core idles (docs/benchmarks.md, "Side by side with the peer"). Replicas behind a load balancer fix
that too, but cost ops a port and a balancer per core; here the kernel spreads the connections.

The parent binds the socket once, starts the embedded PostgreSQL if DATABASE_URL is unset (the workers share
it), and spawns the workers. Each worker is a whole `agent-runtime serve` on the inherited socket: its own
pool, admission (MAX_CONCURRENT_RUNS is per worker), lease keeper and metrics (METRICS_PORT + its index).
A worker accepts connections only once its CrewAI/LiteLLM warm-up is done (api/app.py, `serve_once_warm`): the
port answers (liveness and readiness alike) once the first worker is warm, and a replaced worker joins later.
Everything shared is in PostgreSQL already, as it is between replicas (leases, run exclusivity, the event
log, quotas), so nothing else is needed between the workers.

Signals: the parent forwards SIGTERM/SIGINT to every worker as SIGTERM, and each worker drains as a single
server does (every open stream ends with a terminal event). A terminal's Ctrl-C also reaches the workers
directly; the forwarded copy arrives within the window in which `DrainingServer` counts it as the same Ctrl-C.
A second signal later than that forces the exit, as with one process. SIGHUP is passed on to every worker as it is
(each reloads TOOLS_FILE: engine/tools_reload.py). A worker that dies is replaced (its runs
are taken over by the lease sweep), also one killed during its start-up; one whose start-up failed (it exited
before serving: a bad setting, no database, a broken CrewAI install failing its warm-up) stops the service
instead, since its replacement would fail the same way. A worker whose parent dies drains and exits.

Processes are spawned, not forked: the parent holds no imported CrewAI/LiteLLM state, threads or event loop
that a fork could copy half-way.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as EventType
from types import FrameType

from agent_runtime.api.server import SAME_CTRL_C_SECONDS, run_server
from agent_runtime.observability.tracing import flush_tracing
from agent_runtime.settings import Settings

log = logging.getLogger("agent_runtime.workers")

# After forwarding the shutdown: the workers' own bound (drain + uvicorn's wait) plus this, then SIGKILL.
_KILL_MARGIN_SECONDS = 5.0


@dataclass
class _Worker:
    index: int
    process: BaseProcess
    # Set by the worker once its server has started (lifespan done, socket served).
    started: EventType


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _exit_with_parent() -> None:
    """A worker whose parent is gone (kill -9) drains and exits instead of serving on as an orphan.

    A daemon thread, not a task: the parent's sentinel is a pipe that `multiprocessing` only offers as a
    blocking wait, and this runs before uvicorn creates the worker's event loop. SIGTERM then takes the same
    drain path as a deploy's."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker_main(sock: socket.socket, index: int, settings: Settings, started: EventType) -> None:
    _exit_with_parent()
    run_server(settings, sockets=[sock], worker=index, on_started=started.set)
    # The server has shut down and closed what it opened. The interpreter's own exit would now join every thread
    # pool's threads and may wait on an import another thread holds (the warm-up's, when a stop comes right after
    # start-up): on a loaded machine workers took 15-25 s to exit after "Finished server process", and the
    # supervisor killed them. Nothing is left to do but flush.
    flush_tracing()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class Supervisor:
    def __init__(self, settings: Settings, sock: socket.socket, *, shutdown_seconds: float) -> None:
        self._settings = settings
        self._sock = sock
        self._shutdown_seconds = shutdown_seconds
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        # When each shutdown signal arrived (monotonic).
        self._signals: list[float] = []
        self._wake_r, self._wake_w = os.pipe()

    def _settings_of(self, index: int) -> Settings:
        port = self._settings.metrics_port
        return self._settings.model_copy(update={"metrics_port": None if port is None else port + index})

    def _spawn(self, index: int) -> _Worker:
        started = self._context.Event()
        process = self._context.Process(
            target=_worker_main,
            args=(self._sock, index, self._settings_of(index), started),
            name=f"agent-runtime-worker-{index}",
        )
        process.start()
        log.info("worker spawned", extra={"worker": index, "pid": process.pid})
        return _Worker(index, process, started)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        self._signals.append(time.monotonic())
        os.write(self._wake_w, b"!")

    def _on_hangup(self, sig: int, frame: FrameType | None) -> None:
        for worker in self._workers:
            if worker.process.is_alive() and worker.process.pid is not None:
                os.kill(worker.process.pid, signal.SIGHUP)

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_hangup)
        try:
            self._workers = [self._spawn(i) for i in range(self._settings.workers)]
            status = self._supervise()
            self._stop()
            return status
        finally:
            # The workers are gone and the process only stops the embedded PostgreSQL now: a late copy of the
            # Ctrl-C (uv forwards one) must not interrupt that with a KeyboardInterrupt.
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _supervise(self) -> int:
        wake = self._wake_r
        while True:
            ready = multiprocessing.connection.wait([wake, *(w.process.sentinel for w in self._workers)])
            if wake in ready:
                os.read(wake, 64)
            if self._signals:
                return 0
            for slot, worker in enumerate(self._workers):
                if worker.process.is_alive():
                    continue
                worker.process.join()
                log.error(
                    "worker exited",
                    extra={"worker": worker.index, "pid": worker.process.pid, "exitcode": worker.process.exitcode},
                )
                exitcode = worker.process.exitcode
                # A start-up that failed on its own (exit status >= 0) would fail again; a kill (a signal: < 0) can
                # come during the warm-up's seconds, and is replaced like a kill later.
                if not worker.started.is_set() and exitcode is not None and exitcode >= 0:
                    log.error("worker failed to start: stopping the service", extra={"worker": worker.index})
                    return 1
                self._workers[slot] = self._spawn(worker.index)

    def _forward(self) -> None:
        for worker in self._workers:
            if worker.process.is_alive() and worker.process.pid is not None:
                os.kill(worker.process.pid, signal.SIGTERM)

    def _stop(self) -> None:
        """SIGTERM to every worker, then wait. A signal more than SAME_CTRL_C_SECONDS after the first is
        forwarded too (the workers then force their exit); copies of the first one are not."""
        self._forward()
        forced = False
        deadline = time.monotonic() + self._shutdown_seconds + _KILL_MARGIN_SECONDS
        while any(w.process.is_alive() for w in self._workers):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for worker in self._workers:
                    if worker.process.is_alive():
                        log.error("worker did not stop: killed", extra={"worker": worker.index})
                        worker.process.kill()
                break
            alive = [w.process.sentinel for w in self._workers if w.process.is_alive()]
            ready = multiprocessing.connection.wait([self._wake_r, *alive], timeout=remaining)
            if self._wake_r in ready:
                os.read(self._wake_r, 64)
            if not forced and self._signals and self._signals[-1] - self._signals[0] >= SAME_CTRL_C_SECONDS:
                forced = True
                self._forward()
        for worker in self._workers:
            worker.process.join()


def serve_workers(settings: Settings, sock: socket.socket, *, shutdown_seconds: float) -> int:
    return Supervisor(settings, sock, shutdown_seconds=shutdown_seconds).run()
