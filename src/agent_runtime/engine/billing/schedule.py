"""When peak prices apply: the `schedule` section of `config/pricing.yaml`, and the clock that reads it.

DeepSeek's rule (api-docs.deepseek.com/zh-cn/quick_start/pricing): peak is Beijing time Monday to Friday
09:00-12:00 and 14:00-18:00, except Chinese statutory holidays; every other hour is off-peak. The holidays come
from the `holidays` library (the State Council's yearly notice, kept up by its maintainers), never from a list
of our own. A weekend working day (调休上班) stays off-peak: DeepSeek names weekdays, not working days.
"""

from __future__ import annotations

from datetime import date, datetime, time
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import holidays
from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

Weekday = Literal["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
# In `date.weekday()` order.
WEEKDAYS: tuple[Weekday, ...] = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# The page a price or schedule was read from.
SOURCE_PATTERN = r"^https?://\S+$"


def _in_utc(value: datetime) -> datetime:
    # One offset for every instant in the file: entries sort and compare at a glance, and "+08:00" typed
    # where "Z" was meant (or the reverse) cannot slip through as a plausible time.
    if value.utcoffset():
        raise ValueError("must be in UTC (ending in Z)")
    return value


UtcDatetime = Annotated[AwareDatetime, AfterValidator(_in_utc)]


class ConfigModel(BaseModel):
    """A section of config/pricing.yaml: unknown keys are typos, and a loaded table never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class PeakWindow(ConfigModel):
    """Local wall-clock hours [start, end): 09:00:00 is in 09:00-12:00, 12:00:00 is not."""

    start: time
    end: time

    @field_validator("start", "end", mode="before")
    @classmethod
    def _quoted(cls, value: object) -> object:
        # YAML 1.1 reads an unquoted 9:00 as the base-60 integer 540, which pydantic would take as seconds.
        if isinstance(value, int | float):
            raise ValueError('write the time quoted, as "HH:MM"')
        return value

    @model_validator(mode="after")
    def _ordered(self) -> PeakWindow:
        if self.start >= self.end:
            raise ValueError(f"start {self.start} must be before end {self.end} (a window lies within one day)")
        return self

    def contains(self, moment: time) -> bool:
        return self.start <= moment < self.end


class HolidayCalendar(ConfigModel):
    """Days that are off-peak all day: `holidays.country_holidays(country, categories=categories)`."""

    country: str = Field(min_length=2)
    categories: tuple[str, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _known_to_the_library(self) -> HolidayCalendar:
        try:
            holidays.country_holidays(self.country, categories=self.categories)
        except (NotImplementedError, ValueError) as exc:
            raise ValueError(f"holidays library: {exc}") from exc
        return self

    def days(self) -> holidays.HolidayBase:
        """Filled year by year on first look-up, so it covers whatever years the library knows."""
        return holidays.country_holidays(self.country, categories=self.categories)


class PeakSchedule(ConfigModel):
    effective_from: UtcDatetime = Field(
        description="Since when these hours are known to hold; a peak/off_peak price may not start earlier."
    )
    time_zone: str
    peak_days: tuple[Weekday, ...] = Field(min_length=1)
    peak_windows: tuple[PeakWindow, ...] = Field(min_length=1)
    holidays: HolidayCalendar
    source: str = Field(pattern=SOURCE_PATTERN)
    read_on: date

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value

    @field_validator("peak_days")
    @classmethod
    def _each_day_once(cls, value: tuple[Weekday, ...]) -> tuple[Weekday, ...]:
        if len(set(value)) != len(value):
            raise ValueError("a day is listed twice")
        return value

    @field_validator("peak_windows")
    @classmethod
    def _apart(cls, value: tuple[PeakWindow, ...]) -> tuple[PeakWindow, ...]:
        for index in range(1, len(value)):
            if value[index].start < value[index - 1].end:
                raise ValueError(f"window {index} must start at or after the end of window {index - 1}")
        return value


class PeakClock:
    """Tells the tier of an instant. Built once per price table: the zone and holiday objects are reused."""

    def __init__(self, schedule: PeakSchedule) -> None:
        self._zone = ZoneInfo(schedule.time_zone)
        self._days = frozenset(schedule.peak_days)
        self._windows = schedule.peak_windows
        self._holidays = schedule.holidays.days()

    def tier_at(self, at: datetime) -> Literal["peak", "off_peak"]:
        local = at.astimezone(self._zone)
        if WEEKDAYS[local.weekday()] not in self._days or local.date() in self._holidays:
            return "off_peak"
        moment = local.time()
        return "peak" if any(window.contains(moment) for window in self._windows) else "off_peak"
