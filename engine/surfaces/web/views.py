"""Pure helpers that turn the facade's records into what the templates show: no I/O, no engine.

Everything that reaches HTML as markup goes through here (`markdown`, `highlight`) and is built
from escaped text, so a message's own HTML is always shown as text.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Iterable, Sequence
from zoneinfo import ZoneInfo

from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from engine.query.navigation_results import TimelineEntry
from engine.errors import InvalidInputError
from engine.timeutil import TIME_FLOOR

__all__ = ["Block", "Row", "DayCell", "Section", "sections", "plain", "pick_day", "fold", "row_of", "highlight",
           "markdown", "month_grid", "score_rows", "month_of", "month_step", "TOOL_HEAD_CHARS", "MAX_MESSAGE_CHARS",
           "FIRST_DAY", "LAST_DAY"]

TOOL_HEAD_CHARS = 160
MAX_MESSAGE_CHARS = 20_000  # what the composer accepts; bigger text is an import, not a chat message
# The days a page shows: messages date from 1970 on (TIME_FLOOR), and a calendar of the last year
# `date` holds would run past date.max.
FIRST_DAY, LAST_DAY = TIME_FLOOR.date(), date(9998, 12, 31)
NOTE_TITLES = {"day summary updated": "Day summary updated"}
_MD = MarkdownIt("commonmark", {"html": False, "linkify": False})  # raw HTML in a summary stays text


@dataclass(frozen=True, slots=True)
class Row:
    """One message as the timeline shows it."""

    message_id: str
    time: str  # HH:MM in the user's zone
    role: str
    speaker: str | None
    content: str
    kind: str  # "turn", "tool" or "note"
    head: str  # tools and notes: the folded line
    highlighted: bool


@dataclass(frozen=True, slots=True)
class Block:
    """A message shown as is, or a run of messages a summary covers, folded."""

    folded: bool
    rows: tuple[Row, ...]
    open: bool = False  # a folded block holding the opened message starts open


@dataclass(frozen=True, slots=True)
class DayCell:
    day: date
    in_month: bool
    has_messages: bool
    selected: bool
    today: bool


def pick_day(value: str | None, *, today: date, days: Sequence[date]) -> tuple[date, str | None]:
    """The day a request asks for (today, yesterday or YYYY-MM-DD), and a notice when it was chosen for them.

    Without a day: today when it has messages, else the latest day that has some.
    """
    text = (value or "").strip().lower()
    if text in ("", "latest"):
        if today in days or not days:
            return today, None
        return days[-1], f"No messages today ({today.isoformat()}): showing the latest day that has some."
    if text == "today":
        return today, None
    if text == "yesterday":
        return today - timedelta(days=1), None
    try:
        asked = date.fromisoformat(text) if len(text) == 10 else None
    except ValueError:
        asked = None
    if asked is None:
        raise InvalidInputError(f"day {(value or '')[:40]!r} is not a day: use a date like 2024-03-04, or today or yesterday")
    if not FIRST_DAY <= asked <= LAST_DAY:
        raise InvalidInputError(f"day {asked.isoformat()} is out of range: messages are dated from "
                                f"{FIRST_DAY.isoformat()} on; pick a day up to {LAST_DAY.isoformat()}")
    return asked, None


def month_of(value: str | None, fallback: date) -> date:
    """The first day of the month a calendar shows (`YYYY-MM`, within the days a page shows), else the fallback's."""
    try:
        if value and len(value.strip()) == 7:
            first = date.fromisoformat(value.strip() + "-01")
            if FIRST_DAY <= first <= LAST_DAY:
                return first
    except ValueError:
        pass
    return fallback.replace(day=1)


def month_step(month: date, months: int) -> date | None:
    """The first day of the month `months` after `month` (before it when negative), or None past the
    days a page shows (the calendar then has no arrow that way)."""
    year, index = divmod(month.year * 12 + month.month - 1 + months, 12)
    first = date(year, index + 1, 1)  # a step of a few months from a shown month stays a valid date
    return first if FIRST_DAY <= first <= LAST_DAY else None


def row_of(entry: TimelineEntry, tz: ZoneInfo, open_id: str | None) -> Row:
    m = entry.message
    kind = "note" if entry.kind == "note" else "tool" if m.role == "tool" else "turn"
    if kind == "note":
        prefix, _, rest = m.content.partition(":")
        title = NOTE_TITLES.get(prefix.strip().lower(), prefix.strip().capitalize())
        head = f"{title}: {rest.strip()}" if rest.strip() else title
    else:
        flat = " ".join(m.content.split())
        head = flat if len(flat) <= TOOL_HEAD_CHARS else flat[:TOOL_HEAD_CHARS].rstrip() + "…"
    return Row(message_id=m.message_id, time=m.created_at.astimezone(tz).strftime("%H:%M"), role=m.role,
               speaker=m.speaker, content=m.content, kind=kind, head=head, highlighted=m.message_id == open_id)


def fold(entries: Sequence[TimelineEntry], tz: ZoneInfo, open_id: str | None = None) -> list[Block]:
    """Runs of covered messages become one folded block; the rest are shown one by one."""
    blocks: list[Block] = []
    run: list[Row] = []

    def flush() -> None:
        if run:
            blocks.append(Block(True, tuple(run), open=any(r.highlighted for r in run)))
            run.clear()

    for entry in entries:
        row = row_of(entry, tz, open_id)
        if entry.covered_by is not None:
            run.append(row)
        else:
            flush()
            blocks.append(Block(False, (row,)))
    flush()
    return blocks


def highlight(text: str, terms: Iterable[str]) -> Markup:
    """`text` escaped, with the words that start with one of `terms` in <mark>.

    `terms` are the search's own (stemmed, stop words dropped: `SearchResponse.terms`), so "the" or
    "about" in a snippet stay plain and "decid" marks "decided"; one- and two-letter parts of an id
    mark nothing."""
    words = {w.lower() for w in terms if len(w) >= 3 or any(c.isdigit() for c in w)}
    if not words:
        return escape(text)
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")\w*",
                         re.IGNORECASE)
    out, last = [], 0
    for match in pattern.finditer(text):
        out.append(escape(text[last:match.start()]))
        out.append(Markup("<mark>{}</mark>").format(match.group(0)))
        last = match.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)


def markdown(text: str | None) -> Markup:
    """A summary's Markdown as HTML; any HTML inside it is escaped, never passed through."""
    return Markup(_MD.render(text or ""))


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    html: Markup
    empty: bool  # nothing noted under it


def sections(text: str | None) -> list[Section]:
    """A summary's Markdown cut at its headings (Summary, Goals, ...), each rendered on its own."""
    parts: list[tuple[str, list[str]]] = [("", [])]
    for line in (text or "").splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            parts.append((heading.group(1).strip(), []))
        else:
            parts[-1][1].append(line)
    found = []
    for title, lines in parts:
        body = "\n".join(lines).strip()
        if title or body:
            found.append(Section(title, markdown(body), body.lower().lstrip("-* ").startswith("none noted")))
    return found


def plain(snippet: str) -> str:
    """A snippet without Markdown's heading and emphasis marks (summary snippets carry them)."""
    return re.sub(r"(?:^|(?<=\s))#{1,6}\s+|\*\*", "", snippet)


def month_grid(month: date, days: Sequence[date], selected: date, today: date) -> list[list[DayCell]]:
    """The weeks of `month` (Monday first), each day marked when it has messages."""
    marked = set(days)
    weeks = calendar.Calendar(firstweekday=0).monthdatescalendar(month.year, month.month)
    return [[DayCell(d, d.month == month.month, d in marked, d == selected, d == today) for d in week]
            for week in weeks]


def score_rows(parts: object) -> list[tuple[str, float | None]]:
    """The score parts a result shows, each 0..1 (None: not part of this hit's score)."""
    names = ("vector", "lexical", "window", "own", "summary", "fused", "penalty")
    return [(name, getattr(parts, name, None)) for name in names] if parts is not None else []
