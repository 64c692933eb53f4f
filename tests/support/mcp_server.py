"""An MCP tool server built with the official SDK (FastMCP), as a product team would write one: it checks who asks
(the JWT in the call's `_meta`) before acting. Run over stdio (`python -m tests.support.mcp_server`) or mounted as
a streamable HTTP app (`app()`). Who asked is written back in each answer, so the tests can see it."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import jwt
from mcp.server.fastmcp import Context, FastMCP
from starlette.applications import Starlette

IDENTITY_META_KEY = "agent-runtime/identity"
SECRET_ENV = "MCP_TEST_IDENTITY_SECRET"


def who_asks(ctx: Context[Any, Any, Any], tool: str) -> dict[str, Any]:
    meta = ctx.request_context.meta
    token = (meta.model_extra or {}).get(IDENTITY_META_KEY) if meta is not None else None
    if not isinstance(token, str):
        raise ValueError("who are you? no identity in _meta")
    claims: dict[str, Any] = jwt.decode(
        token, os.environ[SECRET_ENV], algorithms=["HS256"], audience=tool, issuer="agent-runtime"
    )
    return claims


def build() -> FastMCP:
    """A new server (a streamable HTTP app runs once per server instance)."""
    server = FastMCP("social-backend")

    @server.tool(description="Events the user's friends go to from a day on (YYYY-MM-DD).")
    def friends_events(from_date: str, ctx: Context[Any, Any, Any]) -> dict[str, Any]:
        claims = who_asks(ctx, "friends_events")
        return {"events": [f"Picnic on {from_date}"], "for": claims["sub"], "session": claims["sid"]}

    @server.tool(description="Fails, as a backend does when something is wrong.")
    def broken(ctx: Context[Any, Any, Any]) -> str:
        who_asks(ctx, "broken")
        raise ValueError("the events database is down")

    @server.tool(description="Answers with a lot of text.")
    def chatty(ctx: Context[Any, Any, Any]) -> str:
        who_asks(ctx, "chatty")
        return "word " * 5000

    @server.tool(description="Takes its time.")
    async def sluggish(ctx: Context[Any, Any, Any]) -> str:
        await asyncio.sleep(5)
        return "finally"

    @server.tool(description="Ends the server's process, as a crash does.")
    def crash() -> str:
        os._exit(1)

    @server.tool(description="Not on the agent's allow-list.")
    def delete_everything() -> str:
        raise AssertionError("never offered, never called")

    return server


def app() -> Starlette:
    return build().streamable_http_app()


if __name__ == "__main__":
    build().run("stdio")
