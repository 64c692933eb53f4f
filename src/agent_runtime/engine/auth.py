"""Bearer tokens: HS256 JWTs whose `sub` is the user's UUID."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import jwt

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import UnauthorizedError
from agent_runtime.settings import Settings

_ALGORITHM = "HS256"


def mint_token(settings: Settings, user_id: UUID, *, ttl: timedelta | None = None) -> str:
    now = datetime.now(UTC)
    lifetime = ttl if ttl is not None else timedelta(seconds=settings.jwt_default_ttl_seconds)
    claims: dict[str, object] = {"sub": str(user_id), "iat": now, "exp": now + lifetime}
    if settings.jwt_issuer:
        claims["iss"] = settings.jwt_issuer
    if settings.jwt_audience:
        claims["aud"] = settings.jwt_audience
    return jwt.encode(claims, settings.jwt_secret.get_secret_value(), algorithm=_ALGORITHM)


def authenticate(settings: Settings, authorization: str | None) -> RequestContext:
    if not authorization:
        raise UnauthorizedError("missing Authorization header (expected 'Bearer <token>')")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthorizedError("Authorization header must be 'Bearer <token>'")
    try:
        claims = jwt.decode(
            token.strip(),
            settings.jwt_secret.get_secret_value(),
            algorithms=[_ALGORITHM],
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
            options={"require": ["sub", "exp"], "verify_aud": settings.jwt_audience is not None},
        )
    except jwt.ExpiredSignatureError as exc:
        raise UnauthorizedError("token expired") from exc
    except jwt.InvalidTokenError as exc:
        # The library's message says which check failed without echoing the token.
        raise UnauthorizedError(f"invalid token: {exc}") from exc
    try:
        user_id = UUID(str(claims["sub"]))
    except ValueError as exc:
        raise UnauthorizedError("invalid token: sub must be a user UUID") from exc
    return RequestContext(user_id=user_id)
