"""Tools a product team plugs in without forking (`TOOLS_FILE`, default `config/tools.yaml`, docs/tools.md): HTTP
endpoints of the app's backend (`http:`, http_tools.py) and MCP servers (`mcp:`, mcp_tools.py). They are offered to
the execution stage after the tools agents.yaml grants, in the file's order (HTTP tools, then each server's
allow-list), so the tools array, part of the cached prefix, is the same bytes on every call.

`load_tools_file` validates the file (start-up and `agent-runtime` config checks: no connection);
`ConfiguredTools.open` builds the tools, starting the MCP servers' connections, and `aclose` ends them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_runtime.engine.flow.templates import FlowTemplates, TemplateConfigError
from agent_runtime.engine.flow.tools import KNOWN_TOOL_NAMES
from agent_runtime.engine.flow.tools.base import Tool
from agent_runtime.engine.flow.tools.http_tools import HttpTool, HttpToolSpec
from agent_runtime.engine.flow.tools.identity import IdentitySigner
from agent_runtime.engine.flow.tools.mcp_config import McpServerSpec

if TYPE_CHECKING:
    from agent_runtime.engine.flow.tools.mcp_tools import McpServer

_ENV = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")
MIN_IDENTITY_SECRET_BYTES = 32


class ToolsConfigError(TemplateConfigError):
    """The tools file is invalid, or a server it names cannot be used: start-up stops with this message."""


class ToolsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    http: list[HttpToolSpec] = Field(default_factory=list)
    mcp: list[McpServerSpec] = Field(default_factory=list)

    def names(self) -> list[str]:
        """Every tool the file offers, in the order the model is offered them."""
        return [spec.name for spec in self.http] + [grant.name for server in self.mcp for grant in server.tools]

    def requiring_approval(self) -> list[str]:
        http = [spec.name for spec in self.http if spec.requires_approval]
        return http + [grant.name for server in self.mcp for grant in server.tools if grant.requires_approval]


def load_tools_file(path: Path, environ: Mapping[str, str] | None = None) -> ToolsFile:
    """The tools file, validated, its `${NAME}` values filled from the environment; a missing file is no tools."""
    if not path.exists():
        return ToolsFile()
    try:
        raw: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
        tools = ToolsFile.model_validate(raw or {})
    except (yaml.YAMLError, ValidationError) as exc:
        raise ToolsConfigError(f"{path}: {exc}") from None
    names = tools.names()
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ToolsConfigError(f"{path}: duplicate tool names {duplicates}")
    servers = [server.name for server in tools.mcp]
    if len(set(servers)) != len(servers):
        raise ToolsConfigError(f"{path}: duplicate MCP server names")
    env = os.environ if environ is None else environ
    return ToolsFile(
        http=[spec.model_copy(update={"headers": _filled(path, spec.name, spec.headers, env)}) for spec in tools.http],
        mcp=[
            server.model_copy(
                update={
                    "headers": _filled(path, server.name, server.headers, env),
                    "env": _filled(path, server.name, server.env, env),
                }
            )
            for server in tools.mcp
        ],
    )


def _filled(path: Path, owner: str, values: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    missing = sorted({name for value in values.values() for name in _ENV.findall(value)} - set(env))
    if missing:
        raise ToolsConfigError(f"{path}: {owner}: needs the environment variables {missing}")
    return {key: _ENV.sub(lambda match: env[match.group(1)], value) for key, value in values.items()}


def grant_tools_file(
    path: Path, templates: FlowTemplates, tools_file: ToolsFile, *, registered: Collection[str], secret: str | None
) -> FlowTemplates:
    """`templates` granting the file's tools to the execution stage; refuses a file without its identity secret or
    naming a tool already registered (`registered`: beside the built-in ones)."""
    identity_signer(path, tools_file, secret)
    clash = sorted(set(tools_file.names()) & {*KNOWN_TOOL_NAMES, *registered})
    if clash:
        raise ToolsConfigError(f"{path}: tools {clash} are already registered")
    return templates.granting(tools_file.names(), tools_file.requiring_approval())


def identity_signer(path: Path, tools_file: ToolsFile, secret: str | None) -> IdentitySigner | None:
    """The signer of who asks; refuses a file with tools and no (or a short) TOOL_IDENTITY_SECRET."""
    if not tools_file.names():
        return None
    if secret is None or len(secret.encode()) < MIN_IDENTITY_SECRET_BYTES:
        raise ToolsConfigError(
            f"{path} configures tools: TOOL_IDENTITY_SECRET must be set, at least {MIN_IDENTITY_SECRET_BYTES} bytes "
            "(the tool servers verify who asks with it)"
        )
    return IdentitySigner(secret)


@dataclass
class ConfiguredTools:
    """The file's tools, their MCP servers connected; `aclose` at shutdown."""

    tools: list[Tool[Any]] = field(default_factory=list)
    servers: list[McpServer] = field(default_factory=list)
    http: list[HttpTool] = field(default_factory=list)

    @classmethod
    async def open(cls, tools_file: ToolsFile, signer: IdentitySigner | None) -> ConfiguredTools:
        if signer is None:
            return cls()
        opened = cls(http=[HttpTool(spec, signer) for spec in tools_file.http])
        opened.tools = list(opened.http)
        if not tools_file.mcp:
            return opened
        # Imported only when a server is configured: importing the MCP SDK patches uvicorn (mcp_config.py).
        from agent_runtime.engine.flow.tools.mcp_tools import McpServer, mcp_tools

        try:
            for spec in tools_file.mcp:
                server = McpServer(spec)
                await server.start()
                opened.servers.append(server)
        except BaseException:
            await opened.aclose()
            raise
        opened.tools += mcp_tools(opened.servers, signer)
        return opened

    async def aclose(self) -> None:
        for tool in self.http:
            await tool.aclose()
        for server in self.servers:
            await server.aclose()
