"""ENVIRONMENT=production refuses the development JWT secret (README: "production refuses the dev secret").

Anyone holding the public development secret could mint a token for any user, so a production process
must not start with it: neither the CLI (serve, migrate, token) nor a Settings built in code.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from uuid import uuid4

import jwt
import pytest
from pydantic import ValidationError

from agent_runtime.settings import DEV_JWT_SECRET, Settings

REFUSAL = "JWT_SECRET must be set to a real secret when ENVIRONMENT=production"
REAL_SECRET = "a-real-production-secret-0123456789abcdef"


@pytest.mark.parametrize(
    "secret",
    [pytest.param({}, id="secret-unset"), pytest.param({"jwt_secret": DEV_JWT_SECRET}, id="dev-secret-given")],
)
def test_production_settings_refuse_the_development_secret(secret: dict[str, str]) -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(_env_file=None, environment="production", **secret)  # type: ignore[call-arg, arg-type]
    assert [(e["loc"], e["msg"]) for e in raised.value.errors()] == [((), f"Value error, {REFUSAL}")]


def test_production_accepts_a_real_secret_and_development_the_default() -> None:
    production = Settings(_env_file=None, environment="production", jwt_secret=REAL_SECRET)  # type: ignore[call-arg, arg-type]
    assert production.jwt_secret.get_secret_value() == REAL_SECRET
    development = Settings(_env_file=None, environment="development")  # type: ignore[call-arg]
    assert development.jwt_secret.get_secret_value() == DEV_JWT_SECRET


async def _token_command(tmp_path: Path, **env: str) -> tuple[int, str, str]:
    """`agent-runtime token` in a clean directory (no .env) with only the given settings variables."""
    base = {k: v for k, v in os.environ.items() if k not in ("JWT_SECRET", "ENVIRONMENT")}
    user = str(uuid4())
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_runtime.cli",
        "token",
        "--user",
        user,
        env={**base, **env},
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, stdout.decode(), stderr.decode()


async def test_the_cli_mints_nothing_in_production_with_the_development_secret(tmp_path: Path) -> None:
    for extra in ({}, {"JWT_SECRET": DEV_JWT_SECRET}):
        code, stdout, stderr = await _token_command(tmp_path, ENVIRONMENT="production", **extra)
        assert (code, stdout, stderr) == (1, "", f"invalid configuration:\n  settings: Value error, {REFUSAL}\n")
    code, stdout, _ = await _token_command(tmp_path, ENVIRONMENT="production", JWT_SECRET=REAL_SECRET)
    assert code == 0
    claims = jwt.decode(stdout.strip(), REAL_SECRET, algorithms=["HS256"])
    assert set(claims) == {"sub", "iat", "exp"}
