"""Query parameter types whose rules the OpenAPI document states exactly."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

# RFC 3339 as JSON Schema's `date-time` means it: a full date, a time with seconds and an offset. pydantic
# alone also takes "0.5" (seconds since the epoch) or a bare date, which the document does not describe.
_RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


def _rfc3339(value: object) -> object:
    if isinstance(value, str) and not _RFC3339.match(value):
        raise PydanticCustomError("datetime_format", "must be an RFC 3339 date-time, e.g. 2026-01-01T00:00:00Z")
    return value


Rfc3339DateTime = Annotated[datetime, BeforeValidator(_rfc3339)]
