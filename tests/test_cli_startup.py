"""What a newcomer sees when start-up cannot work: one line naming the setting and the cause, exit 1,
no traceback, and nothing started (no embedded PostgreSQL) before the check fails."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.conftest import TEST_JWT_SECRET
from tests.support.own_postgres import OwnPostgres
from tests.support.processes import bounded

from agent_runtime.cli import main

CLI = [sys.executable, "-m", "agent_runtime.cli"]


async def _cli(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await bounded(proc, proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, stdout.decode(), stderr.decode()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    values = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PORT", "HOST", "METRICS_PORT")}
    return {**values, "JWT_SECRET": TEST_JWT_SECRET, "DATA_DIR": str(tmp_path / "data")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", ["serve", "migrate"])
async def test_unreachable_database_url_is_one_line(command: str, env: dict[str, str], tmp_path: Path) -> None:
    env["DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:{_free_port()}/nothing"
    env["PORT"] = str(_free_port())

    code, stdout, stderr = await _cli(command, env=env, cwd=tmp_path)

    assert code == 1
    assert stdout == ""
    assert stderr.startswith("agent-runtime: cannot start: DATABASE_URL: cannot connect: "), stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr


@pytest.fixture(scope="module")
async def url_without_pgvector() -> AsyncIterator[str]:
    pg = OwnPostgres(without_extension="vector")
    try:
        await pg.init()
        await pg.start()
        yield await pg.create_database("no_pgvector")
    finally:
        await pg.close()


@pytest.mark.parametrize("command", ["serve", "migrate"])
async def test_a_server_without_pgvector_is_one_line_naming_it(
    command: str, env: dict[str, str], tmp_path: Path, url_without_pgvector: str
) -> None:
    env["DATABASE_URL"] = url_without_pgvector
    env["PORT"] = str(_free_port())

    code, stdout, stderr = await _cli(command, env=env, cwd=tmp_path)

    assert (code, stdout) == (1, "")
    assert stderr == (
        "agent-runtime: cannot start: DATABASE_URL: the server lacks the pgvector extension (`vector`, for long-term "
        "memories): install it on the database server (Debian/Ubuntu: apt-get install postgresql-18-pgvector; "
        "Docker: the pgvector/pgvector image; else https://github.com/pgvector/pgvector#installation), or leave "
        "DATABASE_URL unset for the embedded PostgreSQL, which has it\n"
    )


async def test_missing_database_names_the_variable(env: dict[str, str], tmp_path: Path, database_url: str) -> None:
    env["DATABASE_URL"] = database_url.rsplit("/", 1)[0] + "/no_such_database_here"

    code, _, stderr = await _cli("migrate", env=env, cwd=tmp_path)

    assert (code, stderr) == (
        1,
        'agent-runtime: cannot start: DATABASE_URL: database "no_such_database_here" does not exist\n',
    )


def test_malformed_database_url_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", "mysql://someone@localhost/db")

    with pytest.raises(SystemExit) as exit_info:
        main(["migrate"])

    message = "invalid configuration: DATABASE_URL: Value error, must be a postgresql:// (or postgres://) URL"
    assert exit_info.value.code == message


async def test_debug_level_adds_the_traceback(env: dict[str, str], tmp_path: Path) -> None:
    env["DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:{_free_port()}/nothing"
    env["LOG_LEVEL"] = "DEBUG"

    code, _, stderr = await _cli("migrate", env=env, cwd=tmp_path)

    assert code == 1
    assert "Traceback" in stderr and "ConnectionRefusedError" in stderr
    assert stderr.splitlines()[-1].startswith("agent-runtime: cannot start: DATABASE_URL: cannot connect: ")


@pytest.mark.parametrize(
    ("port", "message"),
    [
        ("84640", "PORT: Input should be less than or equal to 65535"),
        ("0", "PORT: Input should be greater than or equal to 1"),
        ("-1", "PORT: Input should be greater than or equal to 1"),
    ],
)
def test_port_option_is_validated(port: str, message: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Validated by the settings model, like PORT: before anything starts (sys.exit's message goes to stderr).
    monkeypatch.chdir(tmp_path)

    with pytest.raises(SystemExit) as exit_info:
        main(["serve", f"--port={port}"])

    assert exit_info.value.code == f"invalid configuration: {message}"


@pytest.mark.parametrize(
    ("workers", "message"),
    [
        ("0", "WORKERS: Input should be greater than or equal to 1"),
        ("65", "WORKERS: Input should be less than or equal to 64"),
    ],
)
def test_workers_option_is_validated(
    workers: str, message: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)

    with pytest.raises(SystemExit) as exit_info:
        main(["serve", f"--workers={workers}"])

    assert exit_info.value.code == f"invalid configuration: {message}"


async def test_port_in_use_is_reported_before_the_database_starts(env: dict[str, str], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        code, stdout, stderr = await _cli("serve", "--port", str(port), env=env, cwd=tmp_path)

    assert (code, stdout) == (1, "")
    assert stderr == (
        f"agent-runtime: cannot start: PORT: port {port} on 127.0.0.1 is already in use (another agent-runtime?); "
        "choose another with --port or PORT\n"
    )
    # DATABASE_URL is unset: the embedded PostgreSQL would have created its data directory.
    assert not (tmp_path / "data" / "pgdata").exists()


async def test_production_without_a_model_key_refuses_to_serve_unless_the_demo_model_is_opted_in(
    env: dict[str, str], tmp_path: Path
) -> None:
    for name in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "LLM_MODEL", "ALLOW_DEMO_MODEL_IN_PRODUCTION"):
        env.pop(name, None)
    env["ENVIRONMENT"] = "production"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        refused = await _cli("serve", "--port", str(port), env=env, cwd=tmp_path)
        # Opted in, start-up goes on to its next check (the port, held here so that nothing starts).
        opted_in = await _cli(
            "serve", "--port", str(port), env={**env, "ALLOW_DEMO_MODEL_IN_PRODUCTION": "true"}, cwd=tmp_path
        )

    assert refused == (
        1,
        "",
        "invalid configuration: DEEPSEEK_API_KEY: ENVIRONMENT=production has no model key (DEEPSEEK_API_KEY, or "
        "LLM_MODEL with its provider's key), so the offline demo model would answer every user; set a key, or "
        "ALLOW_DEMO_MODEL_IN_PRODUCTION=true to serve the demo model on purpose\n",
    )
    assert opted_in[0] == 1 and opted_in[2].startswith(f"agent-runtime: cannot start: PORT: port {port} "), opted_in
    assert not (tmp_path / "data" / "pgdata").exists()
