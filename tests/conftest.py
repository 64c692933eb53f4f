from __future__ import annotations

import os
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from uuid import UUID, uuid4

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from tests.support.database import PgServer, create_database, drop_database, find_server
from tests.support.processes import MARKER_ENV, command_line, end_marked, mark_session, marked

from agent_runtime.api.app import create_app
from agent_runtime.db.migrations import apply_migrations
from agent_runtime.db.pool import create_pool
from agent_runtime.engine.auth import mint_token
from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.runtime import RuntimeEngine, load_config
from agent_runtime.settings import Settings

TEST_JWT_SECRET = "test-secret-for-agent-runtime-0123456789abcdef"

# CrewAI and LiteLLM must stay offline and quiet in tests (see LIBRARY-NOTES.md).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

mark_session()


@pytest.fixture(scope="session", autouse=True)
async def no_process_outlives_the_session() -> AsyncIterator[None]:
    """The backstop behind each test's own clean-up: whatever a test or fixture left running is killed once
    the session ends (set up first, so torn down last), with a warning that names it."""
    yield
    session = os.environ[MARKER_ENV]
    left = {pid: command_line(pid) for pid in marked(session)}
    await end_marked(session)
    if left:
        warnings.warn(f"killed {len(left)} processes the tests left running: {left}", stacklevel=1)


@pytest.fixture(scope="session")
async def pg_server() -> AsyncIterator[PgServer]:
    server = await find_server()
    yield server
    if server.embedded is not None:
        server.embedded.stop()


@pytest.fixture(scope="session")
async def database_url(pg_server: PgServer) -> AsyncIterator[str]:
    name = await create_database(pg_server)
    url = pg_server.url_for(name)
    await apply_migrations(url)
    yield url
    await drop_database(pg_server, name)


@pytest.fixture
async def own_database_url(pg_server: PgServer) -> AsyncIterator[str]:
    """A database of the test's own, for claims that hold only if no other test's process sweeps it (the sweep
    is the system's, over every user's runs)."""
    name = await create_database(pg_server)
    url = pg_server.url_for(name)
    await apply_migrations(url)
    yield url
    await drop_database(pg_server, name)


@pytest.fixture(scope="session")
def settings(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        environment="test",
        database_url=database_url,
        data_dir=tmp_path_factory.mktemp("data"),
        jwt_secret=TEST_JWT_SECRET,  # type: ignore[arg-type]
        # Long-term memories add a model call after each turn and a recall before it: the suite's scripted stubs
        # and statement counts assume none, so tests/user_memories/ turns them on where they are the subject.
        user_memories_enabled=False,
        # The in-process engines of the whole session share one database, and each sweeps every user's runs: none
        # takes another test's runs over. tests/test_takeover.py and tests/runs/ledger/test_runs_takeover_limits.py
        # turn takeovers on, on databases of their own.
        run_max_takeovers=0,
    )


@pytest.fixture(scope="session")
async def db_pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(database_url, min_size=1, max_size=30)
    yield pool
    await pool.close()


@pytest.fixture(scope="session")
def engine(settings: Settings, db_pool: asyncpg.Pool) -> RuntimeEngine:
    return RuntimeEngine(settings=settings, pool=db_pool, templates=load_config(settings))


@pytest.fixture(scope="session")
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture(scope="session")
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


class User:
    def __init__(self, settings: Settings) -> None:
        self.id: UUID = uuid4()
        self.ctx = RequestContext(user_id=self.id)
        self.headers = {"Authorization": f"Bearer {mint_token(settings, self.id)}"}


@pytest.fixture
def make_user(settings: Settings) -> Callable[[], User]:
    return lambda: User(settings)


@pytest.fixture
def user(make_user: Callable[[], User]) -> User:
    return make_user()


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]
