"""Every request body in the OpenAPI document has examples, the first being what Swagger UI's "Try it out" sends;
each example is valid for the route's body type and is accepted by the route itself (no 422).

Swagger UI (5.x, as fastapi-offline ships it) takes the body schema's `examples[0]`, else that of the schema its
`$ref` names; without one it makes a body up from the field patterns and picks a `oneOf`/`anyOf` branch at
random (a runs body with `message` and `resume` together, a 422; gibberish titles)."""

from __future__ import annotations

from typing import Any, get_args
from uuid import uuid4

import httpx
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter
from tests.conftest import User

from agent_runtime.api.routes import health, metrics, profile, runs, sessions, usage


def body_routes() -> dict[tuple[str, str], APIRoute]:
    """(method, path template) -> the route, for every route that takes a body. From the routers: FastAPI keeps
    the routes of an included router out of the app's own list."""
    return {
        (method.lower(), route.path): route
        for module in (health, metrics, profile, runs, sessions, usage)
        for route in module.router.routes
        if isinstance(route, APIRoute) and route.body_field is not None
        for method in route.methods or ()
    }


def swagger_examples(document: dict[str, Any], operation: dict[str, Any]) -> list[Any]:
    """The examples Swagger UI offers for the operation's JSON body, the first being what it sends."""
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    if "examples" not in schema and "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    examples: list[Any] = schema.get("examples", [])
    return examples


def every_example(app: FastAPI) -> list[tuple[str, str, Any]]:
    document = app.openapi()
    found = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if "requestBody" in operation:
                found += [(method, path, example) for example in swagger_examples(document, operation)]
    return found


def test_every_request_body_has_examples_valid_for_its_route(app: FastAPI) -> None:
    document = app.openapi()
    routes = body_routes()
    bodies = {
        (method, path): operation
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if "requestBody" in operation
    }
    assert set(bodies) == set(routes)
    assert len(bodies) == 5  # PUT /v1/profile, POST and PATCH sessions, POST runs, POST /v1/agui
    for key, operation in bodies.items():
        examples = swagger_examples(document, operation)
        assert examples, f"{key}: no example for Swagger UI to send"
        route = routes[key]
        assert route.body_field is not None
        body_type = TypeAdapter(route.body_field.field_info.annotation)
        for example in examples:
            body_type.validate_python(example)


def own_models(annotation: Any, found: set[type[BaseModel]]) -> set[type[BaseModel]]:
    """Our models in a type, nested ones included (ag-ui-protocol's are not ours to document)."""
    ours = isinstance(annotation, type) and issubclass(annotation, BaseModel)
    if ours and annotation.__module__.startswith("agent_runtime.") and annotation not in found:
        found.add(annotation)
        for field in annotation.model_fields.values():
            own_models(field.annotation, found)
    for argument in get_args(annotation):
        own_models(argument, found)
    return found


def test_every_model_of_ours_in_a_request_body_has_valid_examples() -> None:
    models: set[type[BaseModel]] = set()
    for route in body_routes().values():
        assert route.body_field is not None
        own_models(route.body_field.field_info.annotation, models)
    names = {model.__name__ for model in models}
    assert names >= {"RunRequest", "ContextItem", "ResumeDecision", "ProfileUpdate", "PreferenceSettings"}
    for model in models:
        examples = model.model_json_schema().get("examples")
        assert examples, f"{model.__name__}: no examples"
        for example in examples:
            model.model_validate(example)


async def test_each_example_is_accepted_by_its_route(app: FastAPI, client: httpx.AsyncClient, user: User) -> None:
    examples = every_example(app)
    assert len(examples) >= 5
    for method, path, example in examples:
        session = await client.post("/v1/sessions", headers=user.headers, json={})
        assert session.status_code == 201
        session_id = session.json()["id"]
        # The session id of the example is nobody's: each goes to a new session of the caller.
        body = {**example, "threadId": session_id, "runId": str(uuid4())} if "threadId" in example else example
        response = await client.request(
            method, path.replace("{session_id}", session_id), headers=user.headers, json=body
        )
        sent = f"{method.upper()} {path} {example}: {response.status_code} {response.text[-1000:]}"
        if "resume" in example or "tool_results" in example:
            # A valid answer to an interrupt or tool call this new session does not have: a conflict, not a 422.
            assert (response.status_code, response.json()["error"]["code"]) == (409, "interrupt_unknown"), sent
            continue
        if example.get("regenerate") is True:
            # A valid regeneration of a turn this new session does not have: a conflict too.
            assert (response.status_code, response.json()["error"]["code"]) == (409, "nothing_to_regenerate"), sent
            continue
        assert response.status_code in (200, 201), sent
        if response.headers["content-type"].startswith("text/event-stream"):
            assert '"type":"RUN_FINISHED"' in response.text, sent
