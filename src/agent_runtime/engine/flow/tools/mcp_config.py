"""What `TOOLS_FILE` says about an MCP server (`mcp:`), apart from the client (mcp_tools.py): the file is validated
without importing the MCP SDK, whose import patches uvicorn's `Server.handle_exit` (sse-starlette, which it imports,
does so to end its streams on shutdown; the original handler still runs). So a service without MCP servers never
imports it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_runtime.engine.flow.tools.http_tools import TOOL_NAME_PATTERN


class McpToolGrant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=TOOL_NAME_PATTERN, description="The server's tool, offered to the model under this name.")
    requires_approval: bool = False
    idempotent: bool | None = Field(
        default=None,
        description="Calling it twice does what calling it once does (a run taken over after its process died calls "
        "it again when its result was not stored). Default: the server's idempotentHint or readOnlyHint.",
    )


class McpServerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=TOOL_NAME_PATTERN, description="Names the server in logs and errors.")
    url: str | None = Field(default=None, pattern=r"^https?://", description="Streamable HTTP endpoint.")
    command: list[str] | None = Field(default=None, min_length=1, description="stdio: the server's command line.")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP only; `${NAME}` from the environment.")
    env: dict[str, str] = Field(default_factory=dict, description="stdio only; `${NAME}` from the environment.")
    tools: list[McpToolGrant] = Field(min_length=1, description="The allow-list: only these are offered.")
    timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    connect_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    max_result_bytes: int = Field(default=16_384, ge=1, le=1_048_576)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of url (streamable HTTP) and command (stdio)")
        if self.url is None and self.headers:
            raise ValueError("headers are for a server reached by url")
        if self.command is None and self.env:
            raise ValueError("env is for a server started by command")
        return self
