"""Schemathesis hooks (loaded from tests/schemathesis.toml): values for the custom string formats our OpenAPI
document uses where a pattern cannot say what is valid (a BCP-47 tag whose language subtag is registered, an
IANA zone name). The values are ones our validators must accept, so a refusal is a real bug."""

from __future__ import annotations

from zoneinfo import available_timezones

import schemathesis
from hypothesis import strategies as st

LANGUAGE_TAGS = ["zh-CN", "zh-Hant-TW", "en", "en-US", "en-GB", "ja-JP", "ko", "fr-FR", "de", "es-419", "pt-BR", "ar"]

schemathesis.openapi.format("bcp47", st.sampled_from(LANGUAGE_TAGS))
schemathesis.openapi.format("iana-time-zone", st.sampled_from(sorted(available_timezones())))
