"""Timestamps and time zones: one parser with one error message for every surface."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from typing import cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from engine.errors import InvalidInputError, InvalidTimestampError, UnknownTimezoneError

__all__ = ["ACCEPTED_FORMS", "TIME_FLOOR", "parse_timestamp", "read_iso", "parse_day", "zone", "to_utc", "utcnow",
           "local_day", "message_time_problem"]

# No conversation message predates the Unix epoch: an earlier time is a unit or parsing mistake.
TIME_FLOOR = datetime(1970, 1, 1, tzinfo=timezone.utc)

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


# Files of the zone database that are not places: the host's own zone (it changes with the host, and
# every stored day with it), the POSIX default rules, a placeholder; and the copies counting leap seconds.
_NOT_PLACES = frozenset({"localtime", "posixrules", "Factory"})


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    try:
        if name in _NOT_PLACES or name.startswith(("posix/", "right/")):
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise UnknownTimezoneError(
            f"unknown time zone {name!r}: use an IANA name such as 'Europe/Paris' or 'UTC'"
        ) from None


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def to_utc(value: datetime, tz: ZoneInfo | None = None, *, field: str = "timestamp") -> datetime:
    """An aware UTC datetime; a naive one is read in `tz` (UTC when None).

    A naive time the clocks skip (inside a daylight-saving gap) is refused: there is no right
    reading of it. A repeated one (the hour after the clocks go back) is its first occurrence.
    """
    try:
        if value.tzinfo is None:
            if tz is not None and _in_gap(value, tz):
                raise InvalidTimestampError(
                    f"{field} {value.isoformat()} does not exist in {getattr(tz, 'key', tz)} (the clocks skip it "
                    f"for daylight saving time): give it with a UTC offset, e.g. '{value.replace(tzinfo=tz).isoformat()}'")
            value = value.replace(tzinfo=tz or timezone.utc)
        return value.astimezone(timezone.utc)
    except OverflowError:  # year 1 east of UTC, year 9999 west of it, datetime.max at -12:00
        raise InvalidTimestampError(f"{field} {value.isoformat()} is out of range: use a time between "
                                    f"{TIME_FLOOR.year} and now, with its UTC offset if not in the user's zone") from None


def second_reading(value: datetime, tz: ZoneInfo) -> datetime | None:
    """For a naive time in the hour a zone repeats (clocks going back), that hour's second pass
    in aware UTC; None for any other time. `to_utc` reads the first pass."""
    if value.tzinfo is not None:
        return None
    try:
        first, second = (value.replace(tzinfo=tz, fold=fold).astimezone(timezone.utc) for fold in (0, 1))
    except OverflowError:
        return None
    return second if second != first else None


def _in_gap(naive: datetime, tz: ZoneInfo) -> bool:
    """True when the wall-clock time never happens in `tz` (it does not survive a round trip)."""
    there = naive.replace(tzinfo=tz).astimezone(timezone.utc).astimezone(tz)
    return there.replace(tzinfo=None) != naive


def read_iso(value: str, *, field: str = "timestamp") -> datetime:
    """An ISO 8601 string as a datetime, naive when it carries no offset (read later in the user's zone)."""
    if not isinstance(value, str) or not value.strip():
        what = "is empty" if isinstance(value, str) else "is not a string"
        raise InvalidTimestampError(f"{field} {value!r} {what}; accepted: {ACCEPTED_FORMS}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InvalidTimestampError(f"cannot read {field} {value!r}; accepted: {ACCEPTED_FORMS}") from None


def parse_timestamp(value: str | datetime | date, tz: ZoneInfo | None = None, *, field: str = "timestamp") -> datetime:
    """Parse an ISO 8601 timestamp to aware UTC; naive values are read in `tz`. A day alone (a date,
    or 'YYYY-MM-DD') is its first instant there: midnight, or the end of the skipped hour where the
    clocks jump at midnight (Cairo, Santiago, Havana in spring)."""
    if isinstance(value, datetime):
        return to_utc(value, tz, field=field)
    day = value if isinstance(value, date) else _day_only(value)
    if day is not None:  # fold 0 in a skipped midnight is the offset before the jump: the jump's instant
        return to_utc(datetime(day.year, day.month, day.day, tzinfo=tz or timezone.utc), field=field)
    return to_utc(read_iso(cast(str, value), field=field), tz, field=field)  # read_iso refuses a non-string


def _day_only(value: object) -> date | None:
    if isinstance(value, str) and len(value.strip()) == 10:
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            return None
    return None


def message_time_problem(moment: datetime, now: datetime, future_tolerance: timedelta) -> str | None:
    """Why an aware UTC message time cannot be stored (None when it can): before 1970 or too far ahead.

    A far-future time would put every later message of the thread out of order, so it is refused up front.
    """
    if moment < TIME_FLOOR:
        return f"{moment.isoformat()} is before {TIME_FLOOR.date().isoformat()}: check the year and the unit"
    if moment == TIME_FLOOR:  # no message is sent at the epoch's first second; exports write 0 for "unknown"
        return (f"{moment.isoformat()} is time 0, which exports write for a missing time: send the real time "
                "(or leave it out for now where that is allowed)")
    if moment - now > future_tolerance:
        hours = future_tolerance.total_seconds() / 3600
        return (f"{moment.isoformat()} is more than {hours:g} h after now ({now.isoformat(timespec='seconds')}): "
                "send the real time, or leave it out for now (the tolerance is CONVSEARCH_FUTURE_TOLERANCE_HOURS)")
    return None


def parse_day(value: str | date) -> date:
    """A `YYYY-MM-DD` calendar day. A datetime is refused: which day it falls on depends on the
    user's zone, and its own date (taken before) could be the day before or after."""
    if isinstance(value, datetime):
        raise InvalidInputError(f"day {value.isoformat()!r} is a moment, not a calendar day: pass the day itself "
                                "(a date, or 'YYYY-MM-DD') as the user's calendar shows it")
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
