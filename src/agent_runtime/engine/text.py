"""Text PostgreSQL can store: `text` and `jsonb` values cannot hold NUL (U+0000); asyncpg fails on it."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

NUL = "\x00"


def _refuse_nul(value: str) -> str:
    if NUL in value:
        raise ValueError("must not contain NUL (\\u0000) characters")
    return value


# For text a client sends: a 422 naming the field, not a failure in the middle of storing it.
ClientText = Annotated[str, AfterValidator(_refuse_nul)]


def storable(value: str) -> str:
    """Model and tool output, which we store rather than refuse: NUL becomes U+FFFD."""
    return value.replace(NUL, "\ufffd") if NUL in value else value
