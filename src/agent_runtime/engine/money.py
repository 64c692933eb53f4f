"""Money in JSON: a fixed-point decimal string ("0.0000012000"), never a float or "0E-10"."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from pydantic import Field, PlainSerializer, WithJsonSchema

Money = Annotated[
    Decimal,
    Field(ge=0),
    PlainSerializer(lambda value: format(value, "f"), return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "pattern": r"^\d+(\.\d+)?$", "examples": ["0.0012000000"]}, mode="serialization"),
]
