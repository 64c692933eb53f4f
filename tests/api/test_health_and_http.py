from __future__ import annotations

import httpx
from tests.conftest import User
from tests.support.errors import error_body


async def test_live(client: httpx.AsyncClient) -> None:
    response = await client.get("/health/live")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_ready_checks_database(client: httpx.AsyncClient) -> None:
    response = await client.get("/health/ready")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "demo_model": True,
        "runs_in_flight": 0,
        "max_concurrent_runs": 64,
        "warm": response.json()["warm"],  # the warm-up imports run in the background; either is valid here
    }


async def test_unknown_route_is_json_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/nope", headers={"X-Request-ID": "req-123"})
    assert response.status_code == 404
    assert response.headers["x-request-id"] == "req-123"
    assert response.json() == {
        "error": {"code": "not_found", "message": "Not Found", "details": [], "request_id": "req-123", "error_id": None}
    }


async def test_method_not_allowed_is_json(client: httpx.AsyncClient) -> None:
    response = await client.put("/health/live")
    assert (response.status_code, response.headers["allow"]) == (405, "GET, HEAD")
    assert response.json() == error_body(response, "method_not_allowed", "Method Not Allowed")


async def test_request_id_generated_when_absent_or_invalid(client: httpx.AsyncClient) -> None:
    first = await client.get("/health/live")
    second = await client.get("/health/live", headers={"X-Request-ID": "bad id with spaces"})
    assert len(first.headers["x-request-id"]) == 32
    assert second.headers["x-request-id"] != "bad id with spaces"
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


async def test_body_over_limit_is_413(client: httpx.AsyncClient, user: User) -> None:
    big = {"username": "x", "bio": "y" * 2_000_000}
    response = await client.put("/v1/profile", json=big, headers=user.headers)
    assert (response.status_code, response.json()) == (
        413,
        error_body(response, "payload_too_large", "request body exceeds 1048576 bytes"),
    )


async def test_chunked_body_over_limit_is_413(client: httpx.AsyncClient, user: User) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(40):
            yield b"x" * 65_536

    response = await client.put(
        "/v1/profile", content=chunks(), headers={**user.headers, "content-type": "application/json"}
    )
    assert (response.status_code, response.json()) == (
        413,
        error_body(response, "payload_too_large", "request body exceeds 1048576 bytes"),
    )


async def test_malformed_json_is_422_naming_body(client: httpx.AsyncClient, user: User) -> None:
    response = await client.put(
        "/v1/profile", content=b"{not json", headers={**user.headers, "content-type": "application/json"}
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"][0]["loc"][0] == "body"


async def test_openapi_documents_models_and_errors(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    for name in ("ErrorResponse", "Session", "Profile", "StoredMessage", "ProfileUpdate"):
        assert name in schemas
    get_session = spec["paths"]["/v1/sessions/{session_id}"]["get"]["responses"]
    for status in ("401", "404", "422"):
        assert get_session[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorResponse"
        }
    assert "HTTPValidationError" not in schemas
    docs = await client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
