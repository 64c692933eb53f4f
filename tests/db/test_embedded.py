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
from tests.support.serve import start_serve, worker_pids

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
    env = {"DATA_DIR": str(data_dir), "HOST": "127.0.0.1"}

    crashed = await start_serve("crashed", database_url=None, workdir=tmp_path, env=env, ready_timeout=120)
    try:
        crashed.kill()  # SIGKILL: no lifespan shutdown, no atexit; PostgreSQL keeps running
        await crashed.proc.wait()
        assert crashed.proc.pid in json.loads((pgdata / HANDLE_PIDS_FILE).read_text())
        assert _postgres_processes(pgdata), "the crash should have left PostgreSQL running"

        clean = await start_serve("clean", database_url=None, workdir=tmp_path, env=env, ready_timeout=120)
        try:
            clean.proc.send_signal(signal.SIGINT)
            await asyncio.wait_for(clean.proc.wait(), 120)
            output = clean.log_tail(20_000)
            assert clean.proc.returncode in (0, 130), output

            assert _postgres_processes(pgdata) == [], output
            assert json.loads((pgdata / HANDLE_PIDS_FILE).read_text()) == []
            assert "Traceback" not in output and '"level": "ERROR"' not in output, output
        finally:
            await clean.close()
    finally:
        # The PostgreSQL the crash left running carries this server's marker: ended here if the clean stop
        # did not.
        await crashed.close()


async def test_a_second_ctrl_c_during_the_stop_leaves_no_postgresql_and_no_traceback(
    data_dir: Path, tmp_path: Path
) -> None:
    # Under `uv run`, a terminal's Ctrl-C reaches the server twice (directly, and forwarded by uv).
    pgdata = (data_dir / "pgdata").resolve()
    env = {"DATA_DIR": str(data_dir), "HOST": "127.0.0.1"}
    server = await start_serve("twice", database_url=None, workdir=tmp_path, env=env, ready_timeout=120)
    try:
        server.proc.send_signal(signal.SIGINT)
        await asyncio.sleep(0.05)  # uv forwards its copy a moment later
        server.proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(server.proc.wait(), 120)

        output = server.log_tail(20_000)
        assert _postgres_processes(pgdata) == [], output
        assert "Traceback" not in output and '"level": "ERROR"' not in output, output
        assert server.proc.returncode in (0, 130), output
    finally:
        await server.close()


async def test_workers_share_the_parents_embedded_postgresql_and_a_ctrl_c_stops_all_of_it(
    data_dir: Path, tmp_path: Path
) -> None:
    """WORKERS=2 without DATABASE_URL: the parent starts the embedded PostgreSQL once and both workers use it.
    A terminal's Ctrl-C reaches the parent and both workers, and uv forwards a copy to the parent."""
    pgdata = (data_dir / "pgdata").resolve()
    env = {"DATA_DIR": str(data_dir), "HOST": "127.0.0.1", "WORKERS": "2"}
    server = await start_serve("workers", database_url=None, workdir=tmp_path, env=env, ready_timeout=120)
    try:
        workers = worker_pids(server.proc.pid)
        assert len(workers) == 2
        assert len(json.loads((pgdata / HANDLE_PIDS_FILE).read_text())) == 1  # one server, the parent's

        for pid in (server.proc.pid, *workers):
            os.kill(pid, signal.SIGINT)
        await asyncio.sleep(0.05)
        server.proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(server.proc.wait(), 120)

        output = server.log_tail(50_000)
        assert server.proc.returncode == 0, output
        assert _postgres_processes(pgdata) == [], output
        assert "Traceback" not in output and '"level": "ERROR"' not in output, output
    finally:
        await server.close()
