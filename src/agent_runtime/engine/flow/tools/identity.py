"""Who asks, for a tool server: a short-lived JWT on every call of a configured tool (an HTTP tool's
`X-Agent-Identity` header, an MCP tool's `_meta["agent-runtime/identity"]`).

HS256 over `TOOL_IDENTITY_SECRET` (a secret shared with the tool servers, not JWT_SECRET: a tool server that can
verify these tokens cannot mint tokens for this API). Claims: `iss` "agent-runtime", `aud` the tool's name (a
token for one tool is refused by another), `sub` the user's id, `sid` the session's id, `iat`, `exp` (60 s later)
and a random `jti`. The user's own token never leaves the service. A tool server checks it with any JWT library,
e.g. `jwt.decode(token, secret, algorithms=["HS256"], audience="friends_events", issuer="agent-runtime")`.
"""

from __future__ import annotations

import time
import uuid

import jwt

from agent_runtime.engine.profiles.models import UserAgentContext

IDENTITY_HEADER = "X-Agent-Identity"
IDENTITY_ISSUER = "agent-runtime"
IDENTITY_TTL_SECONDS = 60


class IdentitySigner:
    def __init__(self, secret: str) -> None:
        self._secret = secret

    def sign(self, tool: str, ctx: UserAgentContext) -> str:
        now = int(time.time())
        claims = {
            "iss": IDENTITY_ISSUER,
            "aud": tool,
            "sub": str(ctx.user_id),
            "sid": str(ctx.session_id) if ctx.session_id is not None else None,
            "iat": now,
            "exp": now + IDENTITY_TTL_SECONDS,
            "jti": uuid.uuid4().hex,
        }
        return jwt.encode(claims, self._secret, algorithm="HS256")
