"""RuntimeEngine: the one object the HTTP layer talks to. It owns the pool and every service."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from agent_runtime.db.embedded import EmbeddedPostgres
from agent_runtime.db.migrations import apply_migrations
from agent_runtime.db.outage import is_unavailable
from agent_runtime.db.pool import create_pool, ping
from agent_runtime.engine.billing.pricing import PricingTable
from agent_runtime.engine.conversation.store import MessageStore
from agent_runtime.engine.flow.configured_models import configured_models, refuse_unpriced
from agent_runtime.engine.flow.template_files import load_flow_templates
from agent_runtime.engine.flow.templates import TASKS_FILE, FlowTemplates, TemplateConfigError
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.flow.tools.tools_file import (
    ConfiguredTools,
    ToolsFile,
    grant_tools_file,
    identity_signer,
    load_tools_file,
)
from agent_runtime.engine.llm.call_builder import model_id_for_litellm
from agent_runtime.engine.llm.catalog import ModelCatalog
from agent_runtime.engine.llm.client import Clock
from agent_runtime.engine.profiles.service import ProfileService
from agent_runtime.engine.runs.service import RunService
from agent_runtime.engine.sessions.service import SessionService
from agent_runtime.engine.tools_reload import ToolsFileTools
from agent_runtime.engine.usage.service import UsageService
from agent_runtime.engine.user_memories.service import MemoryService
from agent_runtime.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class RuntimeEngine:
    settings: Settings
    pool: asyncpg.Pool
    templates: FlowTemplates
    # The database's DSN, for the run-event LISTEN connection (None: followers poll; see engine/runs/events/hub.py).
    dsn: str | None = None
    # When a model call starts, for its price (None: the wall clock; tests pin it).
    clock: Clock | None = None
    # Tools registered beside the built-in ones, which the YAML may grant (create_app's `tools`).
    tools: Sequence[Tool[Any]] = ()
    profiles: ProfileService = field(init=False)
    sessions: SessionService = field(init=False)
    messages: MessageStore = field(init=False)
    usage: UsageService = field(init=False)
    runs: RunService = field(init=False)
    memories: MemoryService = field(init=False)

    def __post_init__(self) -> None:
        self.profiles = ProfileService(self.pool)
        self.sessions = SessionService(self.pool, self.profiles, model=self.settings.effective_llm_model)
        self.messages = MessageStore(self.pool)
        self.usage = UsageService(self.pool, self.settings.user_quotas)
        self.runs = RunService(
            self.settings, self.pool, self.messages, self.templates, dsn=self.dsn, clock=self.clock, tools=self.tools
        )
        self.memories = self.runs.memories

    async def is_ready(self) -> bool:
        try:
            return await ping(self.pool, within_seconds=self.settings.database_acquire_timeout_seconds)
        except Exception as exc:
            if is_unavailable(exc):
                return False
            raise


@dataclass
class EngineResources:
    """What start-up created and shutdown must release, in reverse order."""

    engine: RuntimeEngine
    embedded: EmbeddedPostgres | None
    # TOOLS_FILE's tools, reloaded on SIGHUP (api/app.py).
    tools: ToolsFileTools

    async def close(self) -> None:
        await self.engine.runs.aclose()
        await self.tools.aclose()
        await self.engine.pool.close()
        if self.embedded is not None:
            self.embedded.stop()


def load_config(settings: Settings, tools: Sequence[Tool[Any]] = ()) -> FlowTemplates:
    """Validate the YAML configuration up front: a bad template, price table or model list, or a retired
    model id anywhere, stops start-up. `tools`: those registered beside the built-in ones."""
    return _grant(settings, agent_templates(settings, tools, load_tools_file(settings.tools_file)), tools)


def _grant(settings: Settings, loaded: AgentTemplates, tools: Sequence[Tool[Any]]) -> FlowTemplates:
    registered = [tool.name for tool in tools]
    return grant_tools_file(
        settings.tools_file, loaded.templates, loaded.tools_file, registered=registered, secret=_secret(settings)
    )


@dataclass(frozen=True)
class AgentTemplates:
    """The YAML templates before `TOOLS_FILE`'s tools are granted, and that file as read."""

    templates: FlowTemplates
    tools_file: ToolsFile


def agent_templates(settings: Settings, tools: Sequence[Tool[Any]], tools_file: ToolsFile) -> AgentTemplates:
    pricing = PricingTable.load(settings.pricing_file)
    catalog = ModelCatalog.load(settings.models_file)
    if settings.llm_model is not None:
        catalog.refuse_retired(model_id_for_litellm(settings.llm_model), "LLM_MODEL")
    names = [tool.name for tool in tools] + tools_file.names()
    templates = load_flow_templates(settings.crewai_config_dir, names)
    for name, task in templates.tasks().items():
        if task.model is not None:
            catalog.refuse_retired(model_id_for_litellm(task.model), f"{TASKS_FILE}: {name}.model")
    # A summary asked to be up to N tokens long but capped below N would be cut off mid-sentence every time.
    if settings.memory_summary and templates.summary_max_tokens < settings.memory_summary_max_tokens:
        raise TemplateConfigError(
            f"tasks.yaml: memory_summary.max_tokens ({templates.summary_max_tokens}) must be at least "
            f"MEMORY_SUMMARY_MAX_TOKENS ({settings.memory_summary_max_tokens})"
        )
    refuse_unpriced(configured_models(settings, templates, catalog), pricing, settings)
    return AgentTemplates(templates=templates, tools_file=tools_file)


def _secret(settings: Settings) -> str | None:
    secret = settings.tool_identity_secret
    return secret.get_secret_value() if secret is not None else None


async def open_engine(
    settings: Settings, *, clock: Clock | None = None, tools: Sequence[Tool[Any]] = ()
) -> EngineResources:
    loaded = agent_templates(settings, tools, load_tools_file(settings.tools_file))
    templates = _grant(settings, loaded, tools)
    signer = identity_signer(settings.tools_file, loaded.tools_file, _secret(settings))
    configured_tools = await ConfiguredTools.open(loaded.tools_file, signer)
    embedded: EmbeddedPostgres | None = None
    dsn = settings.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(settings.data_dir)
        dsn = embedded.start()
    try:
        report = await apply_migrations(dsn, settings.migrations_dir)
        log.info("migrations", extra={"applied": report.applied, "already_applied": len(report.already_applied)})
        pool = await create_pool(
            dsn,
            min_size=settings.db_pool_min_size,
            max_size=settings.db_pool_max_size,
            quotas=settings.user_quotas,
            deadlines=settings.database_deadlines,
        )
    except BaseException:
        await configured_tools.aclose()
        if embedded is not None:
            embedded.stop()
        raise
    registered = [*tools, *configured_tools.tools]
    engine = RuntimeEngine(settings=settings, pool=pool, templates=templates, dsn=dsn, clock=clock, tools=registered)
    file_tools = ToolsFileTools(
        settings.tools_file, _secret(settings), engine.runs, loaded.templates, tools, configured_tools
    )
    return EngineResources(engine=engine, embedded=embedded, tools=file_tools)
