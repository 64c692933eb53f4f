from __future__ import annotations

import hashlib
import hmac
import json
from datetime import timedelta
from uuid import uuid4

import httpx
import jwt
import pytest
from fastapi import FastAPI
from jwt.utils import base64url_encode
from tests.conftest import TEST_JWT_SECRET
from tests.support.errors import error_body

from agent_runtime.engine.auth import mint_token
from agent_runtime.settings import Settings

PROTECTED = [
    ("GET", "/v1/profile"),
    ("PUT", "/v1/profile"),
    ("POST", "/v1/sessions"),
    ("GET", "/v1/sessions"),
    ("GET", f"/v1/sessions/{uuid4()}"),
    ("PATCH", f"/v1/sessions/{uuid4()}"),
    ("DELETE", f"/v1/sessions/{uuid4()}"),
    ("GET", f"/v1/sessions/{uuid4()}/messages"),
]


@pytest.mark.parametrize(("method", "path"), PROTECTED)
async def test_missing_token_is_401(client: httpx.AsyncClient, method: str, path: str) -> None:
    response = await client.request(method, path, json={} if method in ("PUT", "PATCH", "POST") else None)
    assert response.status_code == 401
    body = response.json()["error"]
    assert body["code"] == "unauthorized"
    assert body["message"] == "missing Authorization header (expected 'Bearer <token>')"


@pytest.mark.parametrize(("method", "path"), PROTECTED)
async def test_bad_token_is_401(client: httpx.AsyncClient, method: str, path: str) -> None:
    response = await client.request(method, path, headers={"Authorization": "Bearer not-a-jwt"})
    assert (response.status_code, response.json()) == (
        401,
        error_body(response, "unauthorized", "invalid token: Not enough segments"),
    )


def _token(claims: dict[str, object], secret: str = TEST_JWT_SECRET) -> dict[str, str]:
    return {"Authorization": f"Bearer {jwt.encode(claims, secret, algorithm='HS256')}"}


async def test_expired_token_is_401(client: httpx.AsyncClient, settings: Settings) -> None:
    token = mint_token(settings, uuid4(), ttl=timedelta(seconds=-10))
    response = await client.get("/v1/profile", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "token expired"


async def test_wrong_secret_sub_and_scheme_are_401(client: httpx.AsyncClient) -> None:
    exp = 4_102_444_800
    cases = [
        (
            _token({"sub": str(uuid4()), "exp": exp}, secret="another-secret-another-secret-1234"),
            "invalid token: Signature verification failed",
        ),
        (
            _token({"sub": "not-a-uuid", "exp": exp}),
            "invalid token: sub must be a user UUID in canonical form (lower-case, hyphenated)",
        ),
        (_token({"sub": str(uuid4())}), 'invalid token: Token is missing the "exp" claim'),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "Authorization header must be 'Bearer <token>'"),
    ]
    for headers, message in cases:
        response = await client.get("/v1/profile", headers=headers)
        assert (response.status_code, response.json()) == (401, error_body(response, "unauthorized", message))


async def test_issuer_and_audience_checked_when_configured(settings: Settings) -> None:
    from agent_runtime.engine.auth import authenticate
    from agent_runtime.engine.errors import UnauthorizedError

    strict = settings.model_copy(update={"jwt_issuer": "https://issuer.example", "jwt_audience": "agent-runtime"})
    user_id = uuid4()
    ok = mint_token(strict, user_id)
    assert authenticate(strict, f"Bearer {ok}").user_id == user_id
    foreign = mint_token(settings, user_id)  # no iss/aud
    with pytest.raises(UnauthorizedError):
        authenticate(strict, f"Bearer {foreign}")


async def test_health_and_docs_are_public(app: FastAPI, client: httpx.AsyncClient) -> None:
    await app.state.engine.runs.ensure_warm()  # readiness answers 503 `warming_up` until then
    live, ready = await client.get("/health/live"), await client.get("/health/ready")
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    # The readiness body as a whole is test_health_and_http's; here: answered, without a token.
    assert (ready.status_code, ready.json()["status"], ready.json()["database"]) == (200, "ok", "ok")
    docs, spec = await client.get("/docs"), await client.get("/openapi.json")
    assert (docs.status_code, docs.headers["content-type"]) == (200, "text/html; charset=utf-8")
    assert "/openapi.json" in docs.text
    assert (spec.status_code, spec.json()["info"]["title"]) == (200, "agent-runtime")


def _signed(payload: bytes, secret: str = TEST_JWT_SECRET) -> dict[str, str]:
    """A token over exactly these payload bytes (duplicate keys included): `jwt.encode` would build a dict."""
    token = jwt.api_jws.encode(payload, secret, algorithm="HS256")
    return {"Authorization": f"Bearer {token}"}


async def test_time_claims_must_be_numbers(client: httpx.AsyncClient) -> None:
    sub, exp = str(uuid4()), 4_102_444_800
    cases = {
        "exp": {"sub": sub, "exp": str(exp)},
        "nbf": {"sub": sub, "exp": exp, "nbf": "0"},
        "iat": {"sub": sub, "exp": exp, "iat": "0"},
    }
    for claim, claims in cases.items():
        response = await client.get("/v1/profile", headers=_token(claims))
        assert response.status_code == 401, claims
        expected = f"invalid token: claim '{claim}' must be a number (seconds since the epoch)"
        assert response.json()["error"]["message"] == expected
    bool_exp = await client.get("/v1/profile", headers=_token({"sub": sub, "exp": True}))
    assert bool_exp.status_code == 401
    fine = await client.get("/v1/profile", headers=_token({"sub": sub, "exp": exp, "nbf": 0, "iat": 1.5}))
    assert fine.status_code == 200, fine.text


async def test_sub_must_be_the_canonical_uuid_spelling(client: httpx.AsyncClient) -> None:
    user_id = uuid4()
    exp = 4_102_444_800
    for sub in (str(user_id).upper(), user_id.hex, f"{{{user_id}}}", f"urn:uuid:{user_id}", f" {user_id}", 7):
        response = await client.get("/v1/profile", headers=_token({"sub": sub, "exp": exp}))
        assert response.status_code == 401, sub
        message = response.json()["error"]["message"]
        assert message.startswith(("invalid token: sub must be", "invalid token: Subject must be a string")), sub
    response = await client.get("/v1/profile", headers=_token({"sub": str(user_id), "exp": exp}))
    assert response.status_code == 200
    assert response.json()["user_id"] == str(user_id)


async def test_duplicate_claims_are_refused(client: httpx.AsyncClient) -> None:
    first, second = uuid4(), uuid4()
    payload = f'{{"sub": "{first}", "exp": 4102444800, "sub": "{second}"}}'.encode()
    response = await client.get("/v1/profile", headers=_signed(payload))
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "invalid token: duplicate claim 'sub'"
    unique = f'{{"sub": "{first}", "exp": 4102444800}}'.encode()
    assert (await client.get("/v1/profile", headers=_signed(unique))).status_code == 200


def _with_header(header: bytes, claims: dict[str, object], secret: str = TEST_JWT_SECRET) -> dict[str, str]:
    """A token over exactly these header bytes, duplicate keys included (`jwt.encode` would build a dict),
    signed correctly: only the duplicate can be the reason for a refusal."""
    signing_input = b".".join(
        [base64url_encode(header), base64url_encode(json.dumps(claims, separators=(",", ":")).encode())]
    )
    signature = hmac.new(secret.encode(), signing_input, hashlib.sha256).digest()
    return {"Authorization": f"Bearer {(signing_input + b'.' + base64url_encode(signature)).decode()}"}


async def test_a_header_with_a_duplicate_key_is_refused(client: httpx.AsyncClient) -> None:
    claims: dict[str, object] = {"sub": str(uuid4()), "exp": 4_102_444_800}
    cases = {
        b'{"alg":"HS256","typ":"JWT","alg":"HS256"}': "alg",
        b'{"alg":"none","alg":"HS256"}': "alg",  # a reader that keeps the first would see an unsigned token
        b'{"typ":"JWT","alg":"HS256","typ":"JWS"}': "typ",
        b'{"alg":"HS256","kid":"a","kid":"b"}': "kid",
    }
    for header, key in cases.items():
        response = await client.get("/v1/profile", headers=_with_header(header, claims))
        assert (response.status_code, response.json()) == (
            401,
            error_body(response, "unauthorized", f"invalid token: duplicate header key '{key}'"),
        ), header
    unique = await client.get("/v1/profile", headers=_with_header(b'{"alg":"HS256","typ":"JWT"}', claims))
    assert unique.status_code == 200, unique.text
