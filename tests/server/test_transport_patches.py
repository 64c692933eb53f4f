"""Each reach into uvicorn's and h11's internals (src/agent_runtime/api/PATCHES.md) is still where we reach."""

from __future__ import annotations

import inspect

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol


def test_the_head_limit_reads_h11s_receive_buffer() -> None:
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n")
    assert bytes(connection._receive_buffer._data) == b"GET / HTTP/1.1\r\nHost: x\r\n"


def test_uvicorn_parses_every_read_through_handle_events() -> None:
    assert "self.handle_events()" in inspect.getsource(H11Protocol.data_received)
    assert "self.handle_events()" in inspect.getsource(H11Protocol)  # also for a pipelined request


def test_uvicorn_closes_its_listeners_in_shutdown() -> None:
    source = inspect.getsource(uvicorn.Server.shutdown)
    assert "server.close()" in source
    assert "timeout_graceful_shutdown" in source
