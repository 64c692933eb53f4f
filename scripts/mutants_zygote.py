"""A pre-loaded Python that forks one pytest run per request: the mutation check's worker process.

Started by `scripts/mutants.py` in a scratch copy of the tree (cwd and PYTHONPATH), one per worker. It
imports the slow third-party libraries once (LiteLLM and CrewAI: ~11-13 s of CPU on a 2-core machine,
which every app-starting mutant's pytest used to pay again) and then, for each line it reads on stdin (a
JSON request: the pytest arguments and the file for the output), forks a child that runs pytest there.

No module of `agent_runtime` is imported here: every child imports the scratch copy's sources as they are
at fork time, i.e. with the mutant that `mutants.py` has just written. CrewAI is configured by the
project's own `crewai_env.load_crewai`, loaded from the file under a private name so that the package
stays unimported (no mutant touches that module; `mutants.py` refuses one that would).

Protocol, one line each on stdout: `started <pid>` after a fork (the child leads its own process group, so
the caller can kill it and all it started), then `exited <status>` (a negative status is the signal that
ended it, as `subprocess` reports it), once whatever the child left running in its group is killed too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import sys
from pathlib import Path

# The one module the zygote loads from the tree; mutants.py keeps mutants out of it.
CREWAI_ENV = Path("src/agent_runtime/engine/flow/crewai/env.py")
PRELOADED = (
    *("litellm", "pytest", "schemathesis", "hypothesis", "fastapi", "asyncpg", "uvicorn", "httpx", "aiohttp"),
    *("prometheus_client", "jwt", "yaml"),
)


def preload() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    spec = importlib.util.spec_from_file_location("_zygote_crewai_env", CREWAI_ENV)
    assert spec is not None and spec.loader is not None
    crewai_env = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(crewai_env)
    # CrewAI's storage next to the scratch tree, in mutants.py's temporary directory: deleted with it.
    crewai_env.load_crewai(Path.cwd().parent / f"{Path.cwd().name}-data")
    # The rest of what a child would import before its first test: pytest and its plugins (schemathesis pulls
    # in hypothesis), the app's own third-party stack. Measured: 3.3 -> 2.3 s for an engine-level mutant.
    for name in PRELOADED:
        importlib.import_module(name)


def run_child(args: list[str], output: str) -> None:
    os.setsid()
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    import pytest

    status = 3
    try:
        status = int(pytest.main(args))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # No interpreter shutdown: the app's daemon warm-up thread may still be importing, and an exit
        # under it was seen to abort the process (SIGABRT) once in ~300 runs.
        os._exit(status)


def main() -> None:
    preload()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run_child(list(request["args"]), str(request["output"]))
        print(f"started {pid}", flush=True)
        # Exited, not yet reaped: while the child is a zombie its pid, which is its group's id, cannot be
        # reused, so the SIGKILL reaches only what it started and left running (a server its test failed to
        # stop, orphaned workers), never a stranger's group.
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        _, wait_status = os.waitpid(pid, 0)
        print(f"exited {os.waitstatus_to_exitcode(wait_status)}", flush=True)


if __name__ == "__main__":
    main()
