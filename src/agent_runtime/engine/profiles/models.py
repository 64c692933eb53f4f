"""Versioned profile settings (seed: runtime-design-v2) and the per-run UserAgentContext."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Annotated, Literal
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import langcodes
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue

from agent_runtime.engine.profiles.countries import ISO_3166_ALPHA2
from agent_runtime.engine.text import ClientJsonObject, ClientText

# 35 characters is the longest tag RFC 5646 requires implementations to support (section 4.4.1).
MAX_LANGUAGE_TAG_CHARS = 35


def _bcp47(value: str) -> str:
    # langcodes parses the full BCP-47 grammar; we also require the language subtag to be a
    # registered one so that "xx-YY" or "english" is rejected rather than silently stored.
    if len(value) > MAX_LANGUAGE_TAG_CHARS:
        raise ValueError(f"a language tag has at most {MAX_LANGUAGE_TAG_CHARS} characters")
    try:
        tag = langcodes.Language.get(value, normalize=False)
    except ValueError as exc:  # langcodes.LanguageTagError is a ValueError
        raise ValueError(f"not a BCP-47 language tag: {value!r}") from exc
    if not tag.is_valid() or tag.language is None:
        raise ValueError(f"not a valid BCP-47 language tag: {value!r}")
    return str(tag.to_tag())


@cache
def _iana_timezones() -> frozenset[str]:
    # available_timezones() walks the tzdata directories on every call: too slow for every profile write.
    return frozenset(available_timezones())


def _iana_timezone(value: str) -> str:
    # ZoneInfo alone accepts odd keys such as "posixrules"; the available set is the real IANA list.
    if value not in _iana_timezones():
        raise ValueError(f"not an IANA time zone name: {value!r}")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"not an IANA time zone name: {value!r}") from exc
    return value


def _iso_country(value: str) -> str:
    if len(value) != 2 or not value.isascii() or not value.isalpha() or not value.isupper():
        raise ValueError(f"country must be an ISO 3166-1 alpha-2 code in upper case, got {value!r}")
    if value not in ISO_3166_ALPHA2:
        raise ValueError(f"not an assigned ISO 3166-1 alpha-2 country code: {value!r}")
    return value


# ClientText first, so that NUL or a lone surrogate gets the same error here as in every other text field.
# The OpenAPI `format`s name what a pattern cannot say (a registered language subtag, a zone in the IANA list:
# as an enum, its hundreds of names made schemathesis' coverage phase many times longer). No `maxLength` in the
# document: the validators bound the length, and a generator held to a length cannot also hold to the format.
LanguageTag = Annotated[
    ClientText,
    Field(
        description="A valid BCP-47 language tag (at most 35 characters) with a registered language subtag, "
        "e.g. zh-CN or en. OpenAPI format `bcp47`.",
        json_schema_extra={"format": "bcp47"},
    ),
    AfterValidator(_bcp47),
]
TimeZoneName = Annotated[
    ClientText,
    Field(
        description="An IANA time zone name, e.g. Asia/Shanghai. OpenAPI format `iana-time-zone`.",
        json_schema_extra={"format": "iana-time-zone"},
    ),
    AfterValidator(_iana_timezone),
]
CountryCode = Annotated[
    ClientText,
    Field(
        description="An assigned ISO 3166-1 alpha-2 code, upper case, e.g. CN (not a user-assigned one such as ZZ). "
        "OpenAPI format `iso3166-alpha2`.",
        json_schema_extra={"format": "iso3166-alpha2"},
    ),
    AfterValidator(_iso_country),
]


# Examples for /docs: "Try it out" sends the first (generated from the patterns and formats, they were invalid).
_PREFERENCES_EXAMPLE: dict[str, JsonValue] = {
    "interface_language": "zh-CN",
    "ai_language": "en",
    "timezone": "Asia/Shanghai",
    "country": "CN",
}
SETTINGS_V2_EXAMPLE: dict[str, JsonValue] = {
    "version": 2,
    "preferences": _PREFERENCES_EXAMPLE,
    "privacy": {},
    "notification": {},
    "safety": {},
}


class PreferenceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_PREFERENCES_EXAMPLE]})

    interface_language: LanguageTag = "zh-CN"
    ai_language: LanguageTag = "zh-CN"
    timezone: TimeZoneName = "Asia/Shanghai"
    country: CountryCode = "CN"


class ProfileSettingsV1(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"version": 1, "preferences": _PREFERENCES_EXAMPLE}]}
    )

    version: Literal[1] = 1
    preferences: PreferenceSettings = Field(default_factory=PreferenceSettings)
    privacy: ClientJsonObject = Field(default_factory=dict)
    notification: ClientJsonObject = Field(default_factory=dict)


class MemorySettings(BaseModel):
    """Long-term memories (docs/memories.md): off = nothing is stored or recalled for this user (what is stored
    stays until deleted with DELETE /v1/memories)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"enabled": False}]})
    enabled: bool = Field(default=True, strict=True)


class ProfileSettingsV2(BaseModel):
    # `version` is required in the document: settings without it are v1 (see below), whatever else they hold.
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"required": ["version"], "examples": [SETTINGS_V2_EXAMPLE]}
    )

    version: Literal[2] = 2
    preferences: PreferenceSettings = Field(default_factory=PreferenceSettings)
    privacy: ClientJsonObject = Field(default_factory=dict)
    notification: ClientJsonObject = Field(default_factory=dict)
    safety: ClientJsonObject = Field(default_factory=dict)
    # Added within v2 (a default, so every stored v2 document still reads): no version bump.
    memory: MemorySettings = Field(default_factory=MemorySettings)


def _missing_version_is_v1(value: object) -> object:
    # Seed rule: settings stored before versioning have no "version" key and are v1.
    if isinstance(value, dict) and "version" not in value:
        return {**value, "version": 1}
    return value


ProfileSettings = Annotated[
    ProfileSettingsV1 | ProfileSettingsV2, Field(discriminator="version"), BeforeValidator(_missing_version_is_v1)
]


def upgrade_to_latest(settings: ProfileSettingsV1 | ProfileSettingsV2) -> ProfileSettingsV2:
    if isinstance(settings, ProfileSettingsV2):
        return settings
    return ProfileSettingsV2(
        preferences=settings.preferences,
        privacy=settings.privacy,
        notification=settings.notification,
    )


class Profile(BaseModel):
    user_id: UUID
    username: str
    bio: str | None
    settings: ProfileSettings
    created_at: datetime | None = Field(default=None, description="Null until the profile is first saved.")
    updated_at: datetime | None = None


@dataclass(frozen=True)
class UserAgentContext:
    user_id: UUID
    username: str
    bio: str | None
    settings: ProfileSettingsV1 | ProfileSettingsV2
    # The run's session: what a configured tool's server is told besides the user (engine/flow/tools/identity.py).
    session_id: UUID | None = None
    # The run: with a tool call's id, the call's idempotency key (engine/flow/tools/call_identity.py).
    run_id: UUID | None = None
