"""`npm ci` of a test directory's package-lock.json into its node_modules (git-ignored), once: later runs reuse
it while package.json and the lock file are unchanged (a stamp holds their digest). npm's cache:
$AGENT_RUNTIME_NPM_CACHE, default ~/.cache/agent-runtime/npm. No Node/npm or no registry is a failure, not a
skip: CI has both."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

NPM_INSTALL_TIMEOUT = 300
STAMP_NAME = ".agent-runtime-install-stamp"


def npm_cache_dir() -> Path:
    explicit = os.environ.get("AGENT_RUNTIME_NPM_CACHE")
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "agent-runtime" / "npm"


def _digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        digest.update((directory / name).read_bytes())
    return digest.hexdigest()


def _current(directory: Path, digest: str) -> bool:
    try:
        return (directory / "node_modules" / STAMP_NAME).read_text().strip() == digest
    except OSError:
        return False


def npm_ci(directory: Path, *, needed_for: str) -> None:
    """Installs `directory`'s locked packages unless node_modules already matches the lock file."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(f"`{tool}` is not on PATH: {needed_for} needs Node.js 20+ and npm")
    digest = _digest(directory)
    if _current(directory, digest):
        return
    cache = npm_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    # One installer at a time (parallel pytest processes share the directory).
    with (cache / f".agent-runtime-{directory.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _current(directory, digest):
            return
        command = [
            "npm",
            "ci",
            "--no-audit",
            "--no-fund",
            "--prefer-offline",
            "--cache",
            str(cache),
            # An unreachable registry fails in seconds, not after npm's default minute of retries.
            "--fetch-retries=2",
            "--fetch-retry-mintimeout=1000",
            "--fetch-retry-maxtimeout=5000",
        ]
        try:
            done = subprocess.run(
                command, cwd=directory, capture_output=True, text=True, timeout=NPM_INSTALL_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"`{' '.join(command)}` in {directory} did not finish in {NPM_INSTALL_TIMEOUT} s: is the npm "
                f"registry reachable (`npm config get registry`)? {needed_for} needs it."
            )
        if done.returncode != 0:
            pytest.fail(
                f"`{' '.join(command)}` in {directory} exited {done.returncode} ({needed_for}); is the npm registry "
                f"reachable? npm said:\n{(done.stderr or done.stdout)[-3000:]}"
            )
        (directory / "node_modules" / STAMP_NAME).write_text(digest + "\n")


if __name__ == "__main__":
    # .ci/run installs the test directories' packages before the suite, as it installs Chromium and pgvector: the
    # suite's own time is then its tests' (a clean clone's `npm ci` took a minute of it).
    import sys

    for name in sys.argv[1:]:
        npm_ci(Path(name).resolve(), needed_for=f"the tests in {name}")
        print(f"{name}: node_modules matches its package-lock.json")
