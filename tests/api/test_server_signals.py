"""How the server reads Ctrl-C: under `uv run` one press arrives twice, a later press forces the exit.

The subprocess test in tests/db/test_embedded.py shows the whole stop; whether its second signal lands before
uvicorn's main loop notices the first (it ticks every 0.1 s) is up to timing, so the rule itself is pinned here.
"""

from __future__ import annotations

import signal

import pytest
import uvicorn

from agent_runtime.api import server as server_module
from agent_runtime.api.server import DrainingServer


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(server_module.time, "monotonic", fake)
    return fake


def _server(drains: list[str]) -> DrainingServer:
    return DrainingServer(uvicorn.Config(app=lambda: None), on_shutdown_signal=lambda: drains.append("drain"))


@pytest.mark.parametrize(
    ("second_after", "forced"),
    [
        (0.05, False),  # uv forwards its copy of the same press a moment later
        (0.6, True),  # a second press after the window forces the exit
    ],
)
def test_a_second_ctrl_c_forces_the_exit_only_after_half_a_second(
    clock: _Clock, second_after: float, forced: bool
) -> None:
    drains: list[str] = []
    server = _server(drains)

    server.handle_exit(signal.SIGINT, None)
    clock.now += second_after
    server.handle_exit(signal.SIGINT, None)

    assert (server.should_exit, server.force_exit, drains) == (True, forced, ["drain"])


def test_sigterm_starts_the_drain_once(clock: _Clock) -> None:
    drains: list[str] = []
    server = _server(drains)

    server.handle_exit(signal.SIGTERM, None)

    assert (server.should_exit, server.force_exit, drains) == (True, False, ["drain"])
