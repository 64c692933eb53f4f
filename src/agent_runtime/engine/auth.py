"""Bearer tokens: HS256 JWTs whose `sub` is the user's UUID."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import jwt
from jwt.utils import base64url_decode

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import UnauthorizedError
from agent_runtime.settings import Settings

_ALGORITHM = "HS256"
_TIME_CLAIMS = ("exp", "nbf", "iat")


def _refuse_duplicates(kind: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A `json.loads` object hook that refuses a key given twice, naming it as a `kind` ("claim", ...)."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for key, value in pairs:
            if key in values:
                raise jwt.DecodeError(f"duplicate {kind} {key[:64]!r}")
            values[key] = value
        return values

    return unique


def _refuse_duplicate_header_keys(token: str) -> None:
    """PyJWT reads the header with plain `json.loads` too, which keeps the last of duplicate keys: a token
    with `"alg"` twice means one algorithm to us and perhaps the other to a proxy or another verifier. PyJWT
    has no hook for the header, so it is parsed here first. Anything that is not a readable header is left
    to PyJWT, so that malformed tokens keep its messages ("Not enough segments", "Invalid header padding")."""
    try:
        header = base64url_decode(token.split(".", 1)[0])
        json.loads(header, object_pairs_hook=_refuse_duplicates("header key"))
    except (ValueError, RecursionError):
        return


class _StrictJWT(jwt.PyJWT):
    """PyJWT with the checks it leaves out: `json.loads` keeps the last of duplicate claims (so a verifier
    and another party may read different values), and its time checks accept anything `int()` takes,
    e.g. `"exp": "9999999999"`. `_decode_payload` is PyJWT's documented hook for this; it runs after the
    signature check and before the claims are validated."""

    def _decode_payload(self, decoded: dict[str, Any]) -> dict[str, Any]:
        try:
            payload = json.loads(decoded["payload"], object_pairs_hook=_refuse_duplicates("claim"))
        except (ValueError, RecursionError) as exc:
            raise jwt.DecodeError(f"invalid payload: {exc}") from exc
        if not isinstance(payload, dict):
            raise jwt.DecodeError("invalid payload: must be a JSON object")
        for claim in _TIME_CLAIMS:
            value = payload.get(claim)
            if claim in payload and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise jwt.DecodeError(f"claim {claim!r} must be a number (seconds since the epoch)")
        return payload


_decoder = _StrictJWT()


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
        _refuse_duplicate_header_keys(token.strip())
        claims = _decoder.decode(
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
    return RequestContext(user_id=_user_id(claims["sub"]))


def _user_id(sub: object) -> UUID:
    """Only the canonical spelling (lower-case, hyphenated): one user, one `sub`, whoever compares them."""
    try:
        user_id = UUID(sub) if isinstance(sub, str) else None
    except ValueError:
        user_id = None
    if user_id is None or str(user_id) != sub:
        raise UnauthorizedError("invalid token: sub must be a user UUID in canonical form (lower-case, hyphenated)")
    return user_id
