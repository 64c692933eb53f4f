"""`agent-runtime` command line: serve, migrate, token. Heavy imports happen inside the commands."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar
from uuid import UUID

if TYPE_CHECKING:
    from agent_runtime.settings import Settings

_T = TypeVar("_T")


def _settings_or_exit(**overrides: object) -> Settings:
    from pydantic import ValidationError

    from agent_runtime.settings import load_settings

    try:
        return load_settings(**{name: value for name, value in overrides.items() if value is not None})
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc']).upper() or 'settings'}: {e['msg']}" for e in exc.errors()]
        sys.exit("invalid configuration: " + "; ".join(problems))


def _config_or_exit(settings: Settings) -> None:
    """The YAML files, checked before anything starts: one line naming the file and key, not a traceback."""
    from agent_runtime.engine.billing.pricing import PricingConfigError, PricingTable
    from agent_runtime.engine.flow.configured_models import configured_models, unknown_model_warnings
    from agent_runtime.engine.flow.templates import TemplateConfigError
    from agent_runtime.engine.llm.catalog import ModelCatalog, ModelConfigError
    from agent_runtime.engine.runtime import load_config

    try:
        templates = load_config(settings)
    except (TemplateConfigError, PricingConfigError, ModelConfigError) as exc:
        sys.exit(f"invalid configuration: {exc}")
    if not settings.is_demo_model:
        models = configured_models(settings, templates, ModelCatalog.load(settings.models_file))
        for line in unknown_model_warnings(models, PricingTable.load(settings.pricing_file)):
            print(f"agent-runtime: warning: {line}", file=sys.stderr)


def _or_exit(settings: Settings, step: Callable[[], _T]) -> _T:
    """Run a start-up step; a failure one line can explain ends the command with that line (exit 1), the
    traceback only with LOG_LEVEL=DEBUG."""
    from agent_runtime.db.embedded import EmbeddedStartError
    from agent_runtime.db.migrations import MigrationError
    from agent_runtime.preflight import StartupError, describe_database_error

    try:
        return step()
    except (StartupError, EmbeddedStartError, MigrationError) as exc:
        message = str(exc) if not isinstance(exc, EmbeddedStartError) else f"DATA_DIR: {exc}"
        failure: BaseException = exc
    except Exception as exc:
        described = describe_database_error(exc)
        if described is None:
            raise
        message, failure = described, exc
    if settings.log_level == "DEBUG":
        traceback.print_exception(failure)
    sys.exit(f"agent-runtime: cannot start: {message}")


def _serve(args: argparse.Namespace) -> int:
    import asyncio

    from agent_runtime.preflight import check_database, check_port_free

    settings = _settings_or_exit(host=args.host, port=args.port, workers=args.workers)
    refusal = settings.demo_model_refusal()
    if refusal is not None:
        sys.exit(f"invalid configuration: {refusal}")

    def preflight() -> None:
        # Before the embedded database starts or migrations run: these fail in milliseconds, with a hint.
        check_port_free(settings.host, settings.port, "PORT")
        if settings.metrics_enabled and settings.metrics_port is not None:
            for index in range(settings.workers):
                check_port_free(settings.host, settings.metrics_port + index, "METRICS_PORT")
        if settings.database_url is not None:
            asyncio.run(check_database(settings.database_url))

    # First, before the slow imports below: a wrong port or database URL is reported in a fraction of a second.
    _or_exit(settings, preflight)
    _config_or_exit(settings)
    if settings.database_url is None:
        print(f"agent-runtime: DATABASE_URL unset, embedded PostgreSQL data in {settings.data_dir / 'pgdata'}")
    if settings.is_demo_model:
        print("agent-runtime: no LLM key set, answers come from the OFFLINE DEMO MODEL (demo/agent)")
    if settings.workers > 1:
        print(f"agent-runtime: {settings.workers} worker processes")
    print(f"agent-runtime: http://{settings.host}:{settings.port}/docs")
    sys.stdout.flush()
    if settings.workers == 1:
        from agent_runtime.api.server import run_server

        run_server(settings)
        return 0
    return _serve_workers(settings)


def _serve_workers(settings: Settings) -> int:
    """The parent of WORKERS processes (api/workers.py): the socket, the embedded database, the signals."""
    from agent_runtime.api.server import graceful_shutdown_seconds
    from agent_runtime.api.workers import bind_socket, serve_workers
    from agent_runtime.db.embedded import EmbeddedPostgres
    from agent_runtime.logging_setup import configure_logging

    configure_logging(settings.log_level)
    sock = bind_socket(settings.host, settings.port)
    embedded = EmbeddedPostgres(settings.data_dir) if settings.database_url is None else None
    try:
        if embedded is not None:
            settings = settings.model_copy(update={"database_url": _or_exit(settings, embedded.start)})
        return serve_workers(
            settings, sock, shutdown_seconds=graceful_shutdown_seconds(settings.shutdown_grace_seconds)
        )
    finally:
        sock.close()
        if embedded is not None:
            embedded.stop()


def _migrate(_: argparse.Namespace) -> int:
    import asyncio

    from agent_runtime.db.embedded import EmbeddedPostgres
    from agent_runtime.db.migrations import MigrationReport, apply_migrations
    from agent_runtime.logging_setup import configure_logging
    from agent_runtime.preflight import check_database

    settings = _settings_or_exit()
    configure_logging(settings.log_level)

    def migrate() -> MigrationReport:
        if settings.database_url is not None:
            asyncio.run(check_database(settings.database_url))
        embedded = EmbeddedPostgres(settings.data_dir) if settings.database_url is None else None
        dsn = settings.database_url or (embedded.start() if embedded else "")
        try:
            return asyncio.run(apply_migrations(dsn, settings.migrations_dir))
        finally:
            if embedded is not None:
                embedded.stop()

    report = _or_exit(settings, migrate)
    print(f"applied: {', '.join(report.applied) or 'none'}; already applied: {len(report.already_applied)}")
    return 0


def _token(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from agent_runtime.engine.auth import mint_token

    settings = _settings_or_exit()
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
    serve.add_argument("--workers", type=int, help="server processes on the port (default: WORKERS or 1)")
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
    try:
        result: int = args.func(args)
    except KeyboardInterrupt:
        # Ctrl-C before the server took over the signal (during start-up), or the SIGINT uvicorn re-raises
        # after a clean shutdown: nothing is left to stop, and a traceback would only look like a crash.
        return 130
    return result


if __name__ == "__main__":
    sys.exit(main())
