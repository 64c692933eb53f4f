"""Ending every process the tests start, orphans included, found by a marker in their environment.

The test session puts MARKER_ENV=<its pid> in its environment (tests/conftest.py), and `start_serve` gives each
server a marker of its own below it (`<session>/<server>-<uuid>`). Every descendant inherits it: a server's
workers, the replacement of a killed worker, the embedded PostgreSQL it starts. Pids or the process group
would not do: a worker whose parent was killed is re-parented away from it, a replacement has a pid nobody
saw, and PostgreSQL's pg_ctl leaves the process group. (PostgreSQL's own children overwrite their environment
with their process title, so they are not found: they exit on their own once the postmaster is gone.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar
from uuid import uuid4

T = TypeVar("T")

MARKER_ENV = "AGENT_RUNTIME_TEST_PROCESS"


def mark_session() -> None:
    """Marks every process this test session starts from now on (children inherit os.environ)."""
    os.environ[MARKER_ENV] = str(os.getpid())


def marker_for(name: str) -> str:
    """A new marker below the session's, for one server and what it starts."""
    return f"{os.environ[MARKER_ENV]}/{name}-{uuid4().hex}"


def _is_our_resource_tracker(pid: int) -> bool:
    # multiprocessing's resource tracker of this very process (started by a test's spawn context): it ends with this
    # process, when its pipe closes, and killing it early would make multiprocessing warn about leaked resources.
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    return ppid == os.getpid() and "multiprocessing.resource_tracker" in command_line(pid)


def marked(marker: str) -> list[int]:
    """Pids of the live processes whose marker is `marker` or below it (never this process nor its own
    multiprocessing resource tracker)."""
    exact = f"{MARKER_ENV}={marker}".encode()
    below = exact + b"/"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as environ:
                variables = environ.read().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if any(v == exact or v.startswith(below) for v in variables) and not _is_our_resource_tracker(int(name)):
            found.append(int(name))
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(exited)"


async def end_marked(marker: str, within: float = 10.0) -> list[int]:
    """SIGKILL every process carrying `marker` (or one below it) until none is left; returns their pids.

    A killed child of this process stays a zombie until it is waited for: its environment reads empty, so it
    is not found again. AssertionError if some survive `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    killed: list[int] = []
    while pids := marked(marker):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed += [pid for pid in pids if pid not in killed]
        if loop.time() > deadline:
            raise AssertionError(f"processes marked {marker} still alive after SIGKILL: {pids}")
        await asyncio.sleep(0.05)
    return killed


async def bounded(proc: asyncio.subprocess.Process, step: Awaitable[T], seconds: float) -> T:
    """`step` (e.g. `proc.communicate()`) for at most `seconds`: past that `proc` is killed, not left running
    after the test, and TimeoutError raised."""
    try:
        return await asyncio.wait_for(step, seconds)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
