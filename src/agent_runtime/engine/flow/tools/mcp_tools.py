"""Tools of MCP servers (`mcp:` in `TOOLS_FILE`), through the official SDK's client: a server reached by URL
(streamable HTTP) or started by a command (stdio), with an allow-list of its tools.

One `McpServer` per configured server owns its connection in a task of its own on the app's loop (the SDK's
sessions are anyio task groups: entered and left by the same task): it connects, initialises and lists the tools
at start-up or on a reload (a server that cannot be reached, or lacks an allowed tool, stops start-up or fails the
reload), then waits; a call that
finds the connection broken is an error result and the task reconnects behind it. Calls from any run share the
session. The tool list, schemas included, is the one read when the server was started, so a run's cached prefix never
changes under it. Each call carries who asks in the request's `_meta` (`IDENTITY_META_KEY`: the same JWT as the
HTTP tools' header), which a server reads from its request context.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
from mcp import ClientSession, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from pydantic import BaseModel, ConfigDict, JsonValue

from agent_runtime.engine.flow.templates import TemplateConfigError
from agent_runtime.engine.flow.tools.base import Tool, ToolError
from agent_runtime.engine.flow.tools.call_identity import idempotency_key
from agent_runtime.engine.flow.tools.identity import IdentitySigner
from agent_runtime.engine.flow.tools.mcp_config import McpServerSpec, McpToolGrant
from agent_runtime.engine.llm.models import FunctionSpec, ToolSchema
from agent_runtime.engine.profiles.models import UserAgentContext

log = logging.getLogger(__name__)

IDENTITY_META_KEY = "agent-runtime/identity"
# The call's idempotency key (engine/flow/tools/call_identity.py).
IDEMPOTENCY_META_KEY = "agent-runtime/idempotency-key"
RECONNECT_DELAY_SECONDS = 1.0
CLOSE_TIMEOUT_SECONDS = 5.0
# Of a tool's timeout, how long a call waits for the server's answer before it gives up and reconnects.
READ_TIMEOUT_SHARE = 0.9
# How long a server's open response stream may stay silent (the SDK's default).
STREAM_READ_TIMEOUT_SECONDS = 300.0


class McpToolAnswer(BaseModel):
    """What the model gets from an MCP tool: its text blocks, and its structured result when it gave one."""

    content: list[str]
    structured: dict[str, JsonValue] | None = None


class _AnyArgs(BaseModel):
    # The server validates its own arguments against the schema it published (an invalid call is its error result).
    model_config = ConfigDict(extra="allow", frozen=True)


class McpServer:
    """One configured server's connection, owned by its own task (`start` waits until the tools are listed)."""

    def __init__(self, spec: McpServerSpec) -> None:
        self.spec = spec
        self.session: ClientSession | None = None
        self.listed: dict[str, mcp_types.Tool] = {}
        self._ready = asyncio.Event()
        self._broken = asyncio.Event()
        self._closing = asyncio.Event()
        self._failure: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._own(), name=f"mcp-{self.spec.name}")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout=self.spec.connect_timeout_seconds)
        except TimeoutError:
            await self.aclose()
            reason = f": {self._failure}" if self._failure is not None else ""
            raise TemplateConfigError(f"MCP server {self.spec.name!r} did not answer when connecting{reason}") from None
        missing = sorted({grant.name for grant in self.spec.tools} - set(self.listed))
        if missing:
            await self.aclose()
            raise TemplateConfigError(f"MCP server {self.spec.name!r} has no tools {missing}")

    async def aclose(self) -> None:
        """Disconnect; a server that does not let go within CLOSE_TIMEOUT_SECONDS is cut (shutdown never hangs)."""
        self._closing.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=CLOSE_TIMEOUT_SECONDS)
            except TimeoutError:
                log.warning("MCP server did not disconnect in time: cut", extra={"server": self.spec.name})
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            self._task = None

    def broke(self) -> None:
        """A call found the connection unusable: reconnect."""
        self._broken.set()

    async def _own(self) -> None:
        while not self._closing.is_set():
            try:
                async with self._connected() as session:
                    if not self.listed:
                        self.listed = {tool.name: tool for tool in (await session.list_tools()).tools}
                    self.session = session
                    self._broken.clear()
                    self._ready.set()
                    log.info("MCP server connected", extra={"server": self.spec.name})
                    await _first(self._closing, self._broken)
            except Exception as exc:
                self._failure = exc
                log.warning("MCP server unavailable", extra={"server": self.spec.name, "error": repr(exc)})
            finally:
                self.session = None
            if not self._closing.is_set():
                await _sleep_unless(self._closing, RECONNECT_DELAY_SECONDS)

    @contextlib.asynccontextmanager
    async def _connected(self) -> AsyncIterator[ClientSession]:
        async with contextlib.AsyncExitStack() as stack:
            if self.spec.url is not None:
                # The SDK's default timeouts (a server may hold its response stream open), our connect timeout.
                timeout = httpx.Timeout(self.spec.connect_timeout_seconds, read=STREAM_READ_TIMEOUT_SECONDS)
                client = await stack.enter_async_context(httpx.AsyncClient(headers=self.spec.headers, timeout=timeout))
                read, write, _ = await stack.enter_async_context(
                    streamable_http_client(self.spec.url, http_client=client)
                )
            else:
                command, *args = self.spec.command or []
                params = StdioServerParameters(
                    command=command, args=args, env={**get_default_environment(), **self.spec.env}
                )
                read, write = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            yield session


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _sleep_unless(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout=seconds)


class McpTool(Tool[BaseModel]):
    """One allowed tool of an MCP server, offered with the schema the server listed when it was started."""

    def __init__(self, server: McpServer, listed: mcp_types.Tool, grant: McpToolGrant, signer: IdentitySigner) -> None:
        hints = listed.annotations
        hinted = hints is not None and bool(hints.idempotentHint or hints.readOnlyHint)
        super().__init__(
            name=listed.name,
            description=listed.description or listed.name,
            args_model=_AnyArgs,
            timeout_seconds=server.spec.timeout_seconds,
            idempotent=grant.idempotent if grant.idempotent is not None else hinted,
        )
        self._server = server
        self._schema_of_server = ToolSchema(
            function=FunctionSpec(name=listed.name, description=self.description, parameters=listed.inputSchema)
        )
        self._signer = signer

    def _meta(self, ctx: UserAgentContext) -> dict[str, Any]:
        meta: dict[str, Any] = {IDENTITY_META_KEY: self._signer.sign(self.name, ctx)}
        key = idempotency_key()
        if key is not None:
            meta[IDEMPOTENCY_META_KEY] = key
        return meta

    def openai_schema(self) -> ToolSchema:
        return self._schema_of_server

    async def execute(self, args: BaseModel, ctx: UserAgentContext) -> BaseModel:
        session = self._server.session
        name = self._server.spec.name
        if session is None:
            raise ToolError(f"{self.name}: the MCP server {name!r} is not connected")
        try:
            result = await session.call_tool(
                self.name,
                args.model_dump(),
                # Inside the tool's own timeout, so that a call the server never answers ends here, as a failure.
                read_timeout_seconds=timedelta(seconds=self.timeout_seconds * READ_TIMEOUT_SHARE),
                meta=self._meta(ctx),
            )
        except Exception as exc:
            # The session may be dead (the server restarted, or went away): connect again behind this call.
            self._server.broke()
            detail = str(exc)[:200] if isinstance(exc, McpError) else type(exc).__name__
            raise ToolError(f"{self.name}: the MCP server {name!r} failed: {detail}") from None
        texts = [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
        if result.isError:
            raise ToolError(f"{self.name}: {' '.join(texts) or 'the tool failed'}"[:1000])
        answer = McpToolAnswer(content=texts, structured=result.structuredContent)
        if len(answer.model_dump_json().encode()) > self._server.spec.max_result_bytes:
            raise ToolError(f"{self.name}: the answer is larger than {self._server.spec.max_result_bytes} bytes")
        return answer


def mcp_tools(servers: list[McpServer], signer: IdentitySigner) -> list[McpTool]:
    """The allowed tools of started servers, in the file's order (servers, then each allow-list)."""
    return [
        McpTool(server, server.listed[grant.name], grant, signer) for server in servers for grant in server.spec.tools
    ]
