"""Versioned profile settings (seed: runtime-design-v2) and the per-run UserAgentContext."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import langcodes
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter

from agent_runtime.engine.text import ClientJsonObject, ClientText


def _bcp47(value: str) -> str:
    # langcodes parses the full BCP-47 grammar; we also require the language subtag to be a
    # registered one so that "xx-YY" or "english" is rejected rather than silently stored.
    try:
        tag = langcodes.Language.get(value, normalize=False)
    except ValueError as exc:  # langcodes.LanguageTagError is a ValueError
        raise ValueError(f"not a BCP-47 language tag: {value!r}") from exc
    if not tag.is_valid() or tag.language is None:
        raise ValueError(f"not a valid BCP-47 language tag: {value!r}")
    return str(tag.to_tag())


def _iana_timezone(value: str) -> str:
    # ZoneInfo alone accepts odd keys such as "posixrules"; the available set is the real IANA list.
    if value not in available_timezones():
        raise ValueError(f"not an IANA time zone name: {value!r}")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"not an IANA time zone name: {value!r}") from exc
    return value


def _iso_country(value: str) -> str:
    if len(value) != 2 or not value.isascii() or not value.isalpha() or not value.isupper():
        raise ValueError(f"country must be an ISO 3166-1 alpha-2 code in upper case, got {value!r}")
    return value


# 35 characters is the longest tag RFC 5646 requires implementations to support (section 4.4.1).
# ClientText first, so that NUL or a lone surrogate gets the same error here as in every other text field.
LanguageTag = Annotated[ClientText, Field(max_length=35), AfterValidator(_bcp47)]
TimeZoneName = Annotated[ClientText, Field(max_length=64), AfterValidator(_iana_timezone)]
CountryCode = Annotated[ClientText, AfterValidator(_iso_country)]


class PreferenceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    interface_language: LanguageTag = "zh-CN"
    ai_language: LanguageTag = "zh-CN"
    timezone: TimeZoneName = "Asia/Shanghai"
    country: CountryCode = "CN"


class ProfileSettingsV1(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    preferences: PreferenceSettings = Field(default_factory=PreferenceSettings)
    privacy: ClientJsonObject = Field(default_factory=dict)
    notification: ClientJsonObject = Field(default_factory=dict)


class ProfileSettingsV2(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[2] = 2
    preferences: PreferenceSettings = Field(default_factory=PreferenceSettings)
    privacy: ClientJsonObject = Field(default_factory=dict)
    notification: ClientJsonObject = Field(default_factory=dict)
    safety: ClientJsonObject = Field(default_factory=dict)


def _missing_version_is_v1(value: object) -> object:
    # Seed rule: settings stored before versioning have no "version" key and are v1.
    if isinstance(value, dict) and "version" not in value:
        return {**value, "version": 1}
    return value


ProfileSettings = Annotated[
    ProfileSettingsV1 | ProfileSettingsV2, Field(discriminator="version"), BeforeValidator(_missing_version_is_v1)
]
LatestProfileSettings = ProfileSettingsV2
SETTINGS_ADAPTER: TypeAdapter[ProfileSettingsV1 | ProfileSettingsV2] = TypeAdapter(ProfileSettings)


def parse_profile_settings(raw: dict[str, Any] | None) -> ProfileSettingsV1 | ProfileSettingsV2:
    return SETTINGS_ADAPTER.validate_python(raw or {})


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
