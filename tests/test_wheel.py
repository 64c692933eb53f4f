"""The built wheel works outside the repository: its config, prices and migrations are package data.

Builds the wheel, installs it with the locked dependencies into a fresh venv in a temp directory (uv,
from its cache: seconds, and offline once the cache holds the lock's packages), then runs
`agent-runtime migrate` and a demo run against `agent-runtime serve` from there.
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
from tests.conftest import TEST_JWT_SECRET
from tests.runs.conftest import parse_sse
from tests.support.database import PgServer, create_database, drop_database
from tests.support.serve import start_serve

ROOT = Path(__file__).resolve().parents[1]


def _uv() -> str:
    # `uv run` names itself in UV; otherwise the one on PATH, or where .ci/run installs it (the user base).
    found = os.environ.get("UV") or shutil.which("uv") or shutil.which("uv", path=f"{site.getuserbase()}/bin")
    assert found, "uv is needed to build and install the wheel (it runs the test suite too)"
    return found


def _run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"{args}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A venv outside the repository with the wheel and the locked runtime dependencies; its bin/ directory."""
    work = tmp_path_factory.mktemp("wheel")
    uv = _uv()
    _run(uv, "build", "--wheel", "--out-dir", str(work / "dist"), "--quiet", cwd=ROOT)
    (wheel,) = (work / "dist").glob("agent_runtime-*.whl")
    requirements = work / "requirements.txt"
    _run(
        uv,
        "export",
        "--frozen",
        "--no-dev",
        "--no-emit-project",
        "--no-hashes",
        "-q",
        "-o",
        str(requirements),
        cwd=ROOT,
    )
    _run(uv, "venv", "--quiet", "--python", sys.executable, str(work / "venv"), cwd=work)
    python = work / "venv" / "bin" / "python"
    _run(uv, "pip", "install", "--quiet", "--python", str(python), "-r", str(requirements), str(wheel), cwd=work)
    yield work / "venv" / "bin"


def _env(bin_dir: Path, **values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "UV_"))}
    for name in ("DATABASE_URL", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "LLM_MODEL", "CONFIG_DIR", "MIGRATIONS_DIR"):
        env.pop(name, None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return {**env, "JWT_SECRET": TEST_JWT_SECRET, **values}


def test_the_data_files_come_from_the_installed_package(installed: Path, tmp_path: Path) -> None:
    code = "from agent_runtime.resources import data_root; print(data_root())"
    root = Path(_run(str(installed / "python"), "-c", code, cwd=tmp_path, env=_env(installed)).strip())
    assert root.is_relative_to(installed.parent), root
    assert root.parts[-2:] == ("agent_runtime", "data")
    assert sorted(p.name for p in (root / "migrations").glob("*.sql")) == sorted(
        p.name for p in (ROOT / "migrations").glob("*.sql")
    )
    assert (root / "config" / "pricing.yaml").read_text() == (ROOT / "config" / "pricing.yaml").read_text()


async def test_migrate_and_a_demo_run_from_the_installed_wheel(
    installed: Path, tmp_path: Path, pg_server: PgServer
) -> None:
    name = await create_database(pg_server, prefix="agent_runtime_wheel")
    try:
        env = _env(installed, DATABASE_URL=pg_server.url_for(name), DATA_DIR=str(tmp_path / "data"))
        migrated = _run(str(installed / "agent-runtime"), "migrate", cwd=tmp_path, env=env)
        versions = ", ".join(sorted(p.stem for p in (ROOT / "migrations").glob("*.sql")))
        assert migrated == f"applied: {versions}; already applied: 0\n"

        server = await start_serve(
            "wheel",
            database_url=pg_server.url_for(name),
            workdir=tmp_path,
            env={k: v for k, v in env.items() if k != "DATABASE_URL"},
            ready_timeout=120,
            command=[str(installed / "agent-runtime")],
        )
        try:
            token = _run(str(installed / "agent-runtime"), "token", "--user", str(uuid4()), cwd=tmp_path, env=env)
            headers = {"Authorization": f"Bearer {token.strip()}"}
            async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:
                session = await client.post("/v1/sessions", headers=headers, json={})
                assert session.status_code == 201, session.text
                run = await client.post(
                    f"/v1/sessions/{session.json()['id']}/runs", headers=headers, json={"message": "hello"}
                )
                events = parse_sse(run.text)
                assert [e["type"] for e in events][-1] == "RUN_FINISHED", run.text[-2000:]
                assert (await client.get("/docs")).status_code == 200
                # The playground's built page and assets are package data too (ENVIRONMENT=test: it is on).
                page = await client.get("/playground/")
                assert page.status_code == 200 and "text/html" in page.headers["content-type"], page.text[:500]
                (script,) = re.findall(r'src="\./(assets/index-[\w-]+\.js)"', page.text)
                assert (await client.get(f"/playground/{script}")).status_code == 200
            assert await server.stop(within=120) == 0, server.log_tail()
        finally:
            await server.close()
    finally:
        await drop_database(pg_server, name)
