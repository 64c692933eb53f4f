"""One page shape for every list: items, total, limit, offset."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, Field

T = TypeVar("T")

DEFAULT_LIMIT = 20


class PageParams(BaseModel):
    limit: int = Field(default=DEFAULT_LIMIT, ge=1)
    offset: int = Field(default=0, ge=0)


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int = Field(ge=0, description="Number of items across all pages.")
    limit: int
    offset: int
