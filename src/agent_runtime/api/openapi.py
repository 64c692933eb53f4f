"""The OpenAPI document, corrected where a model we do not own describes itself loosely."""

from __future__ import annotations

from typing import Any

import ag_ui.core
from fastapi import FastAPI
from pydantic import BaseModel

# Our own unions may default their tag (profile settings without `version` are v1): only ag-ui's are fixed.
_AGUI_MODELS = {
    name for name, value in vars(ag_ui.core).items() if isinstance(value, type) and issubclass(value, BaseModel)
}


def _require_discriminators(schemas: dict[str, Any]) -> None:
    """A discriminated union's tag must be present to pick a branch, but ag-ui-protocol's message models give
    `role` a default, so pydantic leaves it out of `required` and a body without it looks valid to a client
    generator or schemathesis, then fails with `union_tag_not_found`. Each mapped ag-ui branch requires it."""

    def visit(node: object) -> None:
        if isinstance(node, dict):
            discriminator = node.get("discriminator")
            if isinstance(discriminator, dict):
                tag = discriminator["propertyName"]
                for ref in discriminator.get("mapping", {}).values():
                    name = ref.rsplit("/", 1)[1]
                    branch = schemas[name]
                    if name in _AGUI_MODELS and tag not in branch.setdefault("required", []):
                        branch["required"].append(tag)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schemas)


def install_openapi(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            _require_discriminators(document.get("components", {}).get("schemas", {}))
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to amend the document
