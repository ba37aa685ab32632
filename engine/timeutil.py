"""Timestamps and time zones: one parser with one error message for every surface."""

from __future__ import annotations

from datetime import date, datetime, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from engine.errors import InvalidInputError, InvalidTimestampError, UnknownTimezoneError

__all__ = ["ACCEPTED_FORMS", "parse_timestamp", "parse_day", "zone", "to_utc", "utcnow", "local_day"]

ACCEPTED_FORMS = (
    "ISO 8601: '2024-05-01', '2024-05-01T13:45', '2024-05-01T13:45:30', "
    "'2024-05-01T13:45:30Z' or with an offset such as '2024-05-01T13:45:30+02:00'; "
    "a time without an offset is read in the user's time zone"
)


def zone(name: str) -> ZoneInfo:
    """The IANA zone `name`, or a clear error naming a valid example."""
    if not isinstance(name, str):  # checked before the cache: an unhashable name would raise TypeError
        raise UnknownTimezoneError(f"unknown time zone {name!r}: use an IANA name such as 'Europe/Paris' or 'UTC'")
    return _zone(name)


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise UnknownTimezoneError(
            f"unknown time zone {name!r}: use an IANA name such as 'Europe/Paris' or 'UTC'"
        ) from None


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def to_utc(value: datetime, tz: ZoneInfo | None = None) -> datetime:
    """An aware UTC datetime; a naive one is read in `tz` (UTC when None)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=tz or timezone.utc)
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:  # datetime.max at -12:00 has no UTC form (a datetime handed in by a Python caller)
        raise InvalidTimestampError(f"timestamp {value.isoformat()} is out of range; accepted: {ACCEPTED_FORMS}") from None


def parse_timestamp(value: str | datetime | date, tz: ZoneInfo | None = None) -> datetime:
    """Parse an ISO 8601 timestamp to aware UTC; naive values are read in `tz`."""
    if isinstance(value, datetime):
        return to_utc(value, tz)
    if isinstance(value, date):
        return to_utc(datetime(value.year, value.month, value.day), tz)
    if not isinstance(value, str) or not value.strip():
        raise InvalidTimestampError(f"timestamp {value!r} is not a string; accepted: {ACCEPTED_FORMS}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidTimestampError(f"cannot read timestamp {value!r}; accepted: {ACCEPTED_FORMS}") from None
    return to_utc(parsed, tz)


def parse_day(value: str | date) -> date:
    """A `YYYY-MM-DD` calendar day."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    try:
        if isinstance(value, str) and len(value.strip()) == 10:
            return date.fromisoformat(value.strip())
    except ValueError:
        pass
    raise InvalidInputError(f"day {value!r} is not a calendar day: use YYYY-MM-DD, for example '2024-05-01'")


def local_day(moment: datetime, tz: ZoneInfo) -> date:
    """The calendar day of `moment` in `tz`: what opens a new day segment."""
    return moment.astimezone(tz).date()
