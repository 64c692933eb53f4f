"""`current_time`: now, in the user's own time zone.

The zone comes from the user's profile (validated IANA name), never from the model's arguments: the
model cannot know the user's zone better than the profile, and the args model rejects any argument.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from agent_runtime.engine.flow.tools.base import Tool, ToolArgs
from agent_runtime.engine.profiles.models import UserAgentContext

Clock = Callable[[], datetime]

# Not strftime("%A"): that follows the process locale, and the model should always see the same words.
_WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def utc_now() -> datetime:
    return datetime.now(UTC)


class CurrentTimeArgs(ToolArgs):
    pass


class CurrentTimeResult(BaseModel):
    iso: str = Field(description="ISO 8601 local date and time with UTC offset.")
    weekday: str
    timezone: str


class CurrentTimeTool(Tool[CurrentTimeArgs]):
    def __init__(self, clock: Clock = utc_now) -> None:
        super().__init__(
            name="current_time",
            description="Get the current local date, time and weekday in the user's time zone. Takes no arguments.",
            args_model=CurrentTimeArgs,
            idempotent=True,
        )
        self._clock = clock

    async def execute(self, args: CurrentTimeArgs, ctx: UserAgentContext) -> CurrentTimeResult:
        zone_name = ctx.settings.preferences.timezone
        local = self._clock().astimezone(ZoneInfo(zone_name)).replace(microsecond=0)
        return CurrentTimeResult(iso=local.isoformat(), weekday=_WEEKDAYS[local.weekday()], timezone=zone_name)
