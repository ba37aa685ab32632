"""Dates named in a search query ("in May 2023", "on 3 June, 2023", "in July"), as day spans.

Pure text -> spans: no clock, no store. Only dates the query spells out are read; a relative
expression ("last week") has no anchor a query can be trusted with (a conversation's "last week" is
the speaker's, not the searcher's) and is left to the `recency_days` / `start` / `end` filters.
A message is mentioned at or after the event it tells about, so a span reaches `LATE_MENTION_DAYS`
past what the query names ("camping in June" is often told in the first days of July).
A word before a dated form bounds the span on one side: "since"/"after" a date opens it to every
later day, "before"/"until"/"by" to every earlier one, and "the week before"/"two days after" a
date reaches that far from it (the date itself stays in: it is when the event is told).
`read_dates` also gives the query's text without each date read and the words that bound it: its
keywords, since a turn that mentions "4 March" matches nothing of "ECONNRESET since March 2024".
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta

__all__ = ["DaySpan", "QueryTime", "query_time", "read_dates", "LATE_MENTION_DAYS"]

LATE_MENTION_DAYS = 7  # days after a named day or month that still tell about it
_MONTHS = {name.casefold(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.casefold(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
# Most specific first; each match blanks its text so a shorter form does not read it again.
_FORMS = (
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I),  # 3 June, 2023
    re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I),  # June 3, 2023
    re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)\b"),  # 2023-06-03
    re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I),  # June 2023
    # a month alone only after a word that makes it one ("may" is a verb, "march" can be)
    re.compile(rf"\b(?P<lead>in|during|since|until|by|of|early|mid|late|last|this|next)[\s-]+{_MONTH}(?!\w)", re.I),
    re.compile(rf"\b(?P<lead>in|during|since|until|by|of|before|after)\s+{_YEAR}\b", re.I),  # in 2023
)
# The words before a dated form that bound its span (a month without a year is not bounded: it
# names that month of any year). "from" is not one: "the photo from May 2023" was taken in May.
_BOUND = re.compile(
    r"(?:\b(?P<count>the|a|an|one|two|three|four|few|couple\s+of)\s+(?P<unit>days?|weeks?|weekends?|months?)\s+)?"
    r"\b(?P<bound>since|after|before|until|till|by|prior\s+to)\s+(?:the\s+)?$", re.I)
_COUNTS = {"the": 1, "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "few": 3, "couple of": 2}
_UNIT_DAYS = {"day": 1, "week": 7, "weekend": 7, "month": 31}
_LOOK_BACK = 40  # characters before a dated form that may hold its bound ("a couple of weeks before the ")
# "may" and "march" after "this" are a verb or a noun unless written as a month: "this may be why"
_VERB_MONTHS, _VERB_LEADS = frozenset({"may", "march"}), frozenset({"this"})


@dataclass(frozen=True, slots=True)
class DaySpan:
    """Days from `first` to `last`, both included (None: no bound on that side); `month` alone (no
    year): that month of any year."""

    first: date | None = None
    last: date | None = None
    month: int | None = None

    def holds(self, day: date) -> bool:
        if self.month is not None:
            # the month itself, or its first LATE_MENTION_DAYS days after it
            return day.month == self.month or (day - timedelta(days=LATE_MENTION_DAYS)).month == self.month
        return ((self.first is None or self.first <= day)
                and (self.last is None or day <= self.last + timedelta(days=LATE_MENTION_DAYS)))


@dataclass(frozen=True, slots=True)
class QueryTime:
    """The spans a query names; `holds(day)` is True when any of them holds it."""

    spans: tuple[DaySpan, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.spans)

    def holds(self, day: date) -> bool:
        return any(span.holds(day) for span in self.spans)


def query_time(text: str) -> QueryTime:
    """The day spans `text` names, most specific form first; none when it names no date."""
    return read_dates(text)[0]


def read_dates(text: str) -> tuple[QueryTime, str]:
    """The day spans `text` names, and `text` with the dated forms read blanked (its keywords without
    the date: "ECONNRESET since March 2024" must not rank a turn about "4 March" for its "March")."""
    spans: list[DaySpan] = []
    keywords = text
    scanned = text  # each form's match blanked (same length), dates or not, so no shorter form reads it again
    for form in _FORMS:
        def read(match: re.Match[str]) -> str:
            nonlocal keywords
            parts = match.groupdict()
            span = None if _a_verb(parts) else _span(parts)
            if span is not None:
                before = match.string[max(match.start() - _LOOK_BACK, 0):match.start()]
                bound = _BOUND.search(f"{before}{parts.get('lead') or ''} ")  # "since 2023": its own lead
                spans.append(_bounded(span, bound))
                cut = match.start() - (max(len(before) - bound.start(), 0) if bound else 0)  # "the week before" too
                keywords = keywords[:cut] + " " * (match.end() - cut) + keywords[match.end():]
            return " " * len(match.group(0))
        scanned = form.sub(read, scanned)
    return QueryTime(tuple(spans)), keywords


def _a_verb(parts: dict[str, str | None]) -> bool:
    month = parts.get("month") or ""
    return ((parts.get("lead") or "").casefold() in _VERB_LEADS and month.casefold() in _VERB_MONTHS
            and not month[:1].isupper())


def _span(parts: dict[str, str | None]) -> DaySpan | None:
    """A matched form's span, or None when it names no real date (31 June)."""
    month_text, day_text, year_text = parts.get("month"), parts.get("day"), parts.get("year")
    month = (int(month_text) if month_text.isdigit() else _MONTHS[month_text.casefold()]) if month_text else None
    year = int(year_text) if year_text else None
    try:
        if day_text is not None and month is not None and year is not None:
            day = date(year, month, int(day_text))
            return DaySpan(day, day)
    except ValueError:
        return None
    if month is not None and year is not None:
        return DaySpan(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]))
    if month is not None:
        return DaySpan(month=month)
    if year is not None:
        return DaySpan(date(year, 1, 1), date(year, 12, 31))
    return None


def _bounded(span: DaySpan, found: re.Match[str] | None) -> DaySpan:
    """`span` as the words just before it bound it (`_BOUND`'s match; see the module's docstring)."""
    if found is None or span.first is None or span.last is None:
        return span
    bound = " ".join(found["bound"].casefold().split())
    later = bound in ("since", "after")
    if found["unit"] is not None:  # "the week before": that far from the date, the date kept
        count = _COUNTS[" ".join(found["count"].casefold().split())]
        reach = timedelta(days=count * _UNIT_DAYS[found["unit"].casefold().removesuffix("s")])
        return DaySpan(span.first, span.last + reach) if later else DaySpan(span.first - reach, span.last)
    if bound == "after":
        return DaySpan(span.last + timedelta(days=1), None)
    if bound in ("before", "prior to"):
        return DaySpan(None, span.first - timedelta(days=1))
    return DaySpan(span.first, None) if later else DaySpan(None, span.last)
