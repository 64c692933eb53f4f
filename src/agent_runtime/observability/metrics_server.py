"""METRICS_PORT: the metrics on a listener of their own, so /metrics need not be reachable where the API is."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, start_http_server


@dataclass
class MetricsServer:
    server: WSGIServer
    thread: threading.Thread

    @classmethod
    def start(cls, host: str, port: int) -> MetricsServer:
        # prometheus-client's own server, on a daemon thread: it has no asyncio server, and a second uvicorn
        # in this loop would install its own signal handlers over the main server's.
        server, thread = start_http_server(port, addr=host, registry=REGISTRY)
        return cls(server=server, thread=thread)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
