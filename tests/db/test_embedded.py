"""The embedded PostgreSQL is stopped on every clean exit, whatever an earlier crash left behind."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import TEST_JWT_SECRET
from tests.support.serve import free_port, spawn_serve, wait_ready

from agent_runtime.db.embedded import HANDLE_PIDS_FILE, repair_handle_pids


def _postgres_processes(pgdata: Path) -> list[int]:
    """Pids of the PostgreSQL server processes (postmaster and children) whose command line names pgdata."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "postgres" in cmdline and str(pgdata) in cmdline:
            found.append(int(entry.name))
    return found


def test_repair_drops_dead_pids_only(tmp_path: Path) -> None:
    dead = 2**22 + 12345  # above the kernel's pid_max default: never a live process
    (tmp_path / HANDLE_PIDS_FILE).write_text(json.dumps([dead, os.getpid()]))

    assert repair_handle_pids(tmp_path) == [dead]
    assert json.loads((tmp_path / HANDLE_PIDS_FILE).read_text()) == [os.getpid()]
    assert repair_handle_pids(tmp_path) == []
    (tmp_path / HANDLE_PIDS_FILE).write_text("[12, ")  # torn write
    assert repair_handle_pids(tmp_path) == []
    assert json.loads((tmp_path / HANDLE_PIDS_FILE).read_text()) == []


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not under pytest's tmp_path: as root, PostgreSQL runs as the `pgserver` user, and any pytest session
    # starting on the machine resets pytest's temp root to mode 0700, locking that user out mid-test.
    path = Path(tempfile.mkdtemp(prefix="agent-runtime-test-embedded-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_clean_stop_after_a_kill_9_leaves_no_postgresql(data_dir: Path, tmp_path: Path) -> None:
    pgdata = (data_dir / "pgdata").resolve()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "HOST", "METRICS_PORT")}
    env |= {"DATA_DIR": str(data_dir), "JWT_SECRET": TEST_JWT_SECRET}

    port = free_port()
    crashed = await spawn_serve({**env, "PORT": str(port)}, cwd=tmp_path)
    try:
        await wait_ready(crashed, port)
    finally:
        crashed.kill()  # SIGKILL: no lifespan shutdown, no atexit; PostgreSQL keeps running
        await crashed.wait()
    assert crashed.pid in json.loads((pgdata / HANDLE_PIDS_FILE).read_text())
    assert _postgres_processes(pgdata), "the crash should have left PostgreSQL running"

    port = free_port()
    clean = await spawn_serve({**env, "PORT": str(port)}, cwd=tmp_path)
    try:
        await wait_ready(clean, port)
    finally:
        clean.send_signal(signal.SIGINT)
        output = (await asyncio.wait_for(clean.communicate(), 60))[0].decode()
    assert clean.returncode in (0, 130), output[-2000:]

    assert _postgres_processes(pgdata) == [], output[-2000:]
    assert json.loads((pgdata / HANDLE_PIDS_FILE).read_text()) == []
    assert "Traceback" not in output and '"level": "ERROR"' not in output, output[-3000:]
