"""`agent-runtime` command line: serve, migrate, token. Heavy imports happen inside the commands."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    from agent_runtime.settings import Settings


def _settings_or_exit() -> object:
    from pydantic import ValidationError

    from agent_runtime.settings import get_settings

    try:
        return get_settings()
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(p) for p in e['loc']).upper() or 'settings'}: {e['msg']}" for e in exc.errors()]
        sys.exit("invalid configuration:\n" + "\n".join(lines))


def _config_or_exit(settings: Settings) -> None:
    """The YAML files, checked before anything starts: one line naming the file and key, not a traceback."""
    from agent_runtime.engine.billing.pricing import PricingConfigError
    from agent_runtime.engine.flow.templates import TemplateConfigError
    from agent_runtime.engine.runtime import load_config

    try:
        load_config(settings)
    except (TemplateConfigError, PricingConfigError) as exc:
        sys.exit(f"invalid configuration: {exc}")


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from agent_runtime.api.app import create_app
    from agent_runtime.api.server import DrainingServer, graceful_shutdown_seconds
    from agent_runtime.api.transport import uvicorn_limits
    from agent_runtime.logging_setup import configure_logging
    from agent_runtime.settings import Settings

    settings = _settings_or_exit()
    assert isinstance(settings, Settings)
    _config_or_exit(settings)
    configure_logging(settings.log_level)
    host = args.host or settings.host
    port = args.port or settings.port
    if settings.database_url is None:
        print(f"agent-runtime: DATABASE_URL unset, embedded PostgreSQL data in {settings.data_dir / 'pgdata'}")
    if settings.is_demo_model:
        print("agent-runtime: no LLM key set, answers come from the OFFLINE DEMO MODEL (demo/agent)")
    print(f"agent-runtime: http://{host}:{port}/docs")
    sys.stdout.flush()
    # SIGINT/SIGTERM first drain the runs (api/server.py: every open stream ends with a terminal event), then
    # uvicorn runs the lifespan shutdown, which closes the pool and stops the embedded PostgreSQL; nothing may
    # rely on atexit hooks.
    app = create_app(settings)

    def drain() -> None:
        engine = getattr(app.state, "engine", None)
        if engine is not None:
            engine.runs.request_drain()

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=graceful_shutdown_seconds(settings.shutdown_grace_seconds),
        **uvicorn_limits(settings),  # header size and deadline, keep-alive, concurrency ceiling
    )
    DrainingServer(config, on_shutdown_signal=drain).run()
    return 0


def _migrate(_: argparse.Namespace) -> int:
    import asyncio

    from agent_runtime.db.embedded import EmbeddedPostgres
    from agent_runtime.db.migrations import apply_migrations
    from agent_runtime.settings import Settings

    settings = _settings_or_exit()
    assert isinstance(settings, Settings)
    embedded = EmbeddedPostgres(settings.data_dir) if settings.database_url is None else None
    dsn = settings.database_url or (embedded.start() if embedded else "")
    try:
        report = asyncio.run(apply_migrations(dsn))
    finally:
        if embedded is not None:
            embedded.stop()
    print(f"applied: {', '.join(report.applied) or 'none'}; already applied: {len(report.already_applied)}")
    return 0


def _token(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from agent_runtime.engine.auth import mint_token
    from agent_runtime.settings import Settings

    settings = _settings_or_exit()
    assert isinstance(settings, Settings)
    print(mint_token(settings, args.user, ttl=timedelta(seconds=args.ttl) if args.ttl else None))
    return 0


def _positive_int(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent-runtime", description="Run and administer agent-runtime.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the HTTP service (applies pending migrations first)")
    serve.add_argument("--host", help="bind address (default: HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: PORT or 8000)")
    serve.set_defaults(func=_serve)
    migrate = sub.add_parser("migrate", help="apply pending database migrations and exit")
    migrate.set_defaults(func=_migrate)
    token = sub.add_parser("token", help="mint a bearer token for local use")
    token.add_argument("--user", type=UUID, required=True, help="user UUID (the token's sub)")
    token.add_argument("--ttl", type=_positive_int, help="lifetime in seconds (default: JWT_DEFAULT_TTL_SECONDS)")
    token.set_defaults(func=_token)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
