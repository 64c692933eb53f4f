"""Text PostgreSQL can store: `text` and `jsonb` values cannot hold NUL (U+0000); asyncpg fails on it."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

NUL = "\x00"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
NUL_MESSAGE = "must not contain NUL (U+0000)"
SURROGATE_MESSAGE = "must not contain a lone surrogate (U+D800..U+DFFF)"


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored (NUL, or a lone surrogate UTF-8 cannot encode), or None when it can."""
    match = _UNSTORABLE.search(value)
    if match is None:
        return None
    return NUL_MESSAGE if match.group() == NUL else SURROGATE_MESSAGE


def _refuse_nul(value: str) -> str:
    if NUL in value:
        raise ValueError("must not contain NUL (\\u0000) characters")
    return value


# For text a client sends: a 422 naming the field, not a failure in the middle of storing it.
ClientText = Annotated[str, AfterValidator(_refuse_nul)]


def storable(value: str) -> str:
    """Model and tool output, which we store rather than refuse: NUL and lone surrogates become U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", value) if _UNSTORABLE.search(value) else value
