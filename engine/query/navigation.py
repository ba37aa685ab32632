"""Navigation: reading a user's history by id, by time, by seq and by literal text.

Every method takes `user_id` first and is scoped to that user: another user's message, day or
thread id is answered exactly like an unknown id. Methods that walk a thread use the user's
continuous thread unless a `thread_id` of the user is given.

Engine notes (Message.kind == "note", e.g. "day summary updated") are not conversation content,
so every list here leaves them out; `get_message` still opens one by its id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from engine.errors import InvalidInputError
from engine.models import DaySegment, Message, Summary, User
from engine.query.navigation_results import (
    ANSWER_CAP_CHARS,
    AROUND_BEFORE_RATIO,
    AROUND_COUNT,
    CONTEXT_TURNS,
    SINCE_LIMIT,
    SUBSTRING_LIMIT,
    VIEW_FIELD_CHARS,
    ConversationContext,
    DayView,
    MessageView,
    SummaryView,
    TurnsAround,
    TurnsSince,
    answer_views,
    fitting,
    message_view,
    summary_view,
    view_weight,
)
from engine.store.core import Store, continuous_thread_id
from engine.text_rules import check_text, check_unit_interval
from engine.timeutil import parse_timestamp, utcnow, zone
from engine.validation import shown_number, seq_number, whole_number

__all__ = ["Navigator", "MAX_LIMIT"]  # its records live in engine.query.navigation_results

MAX_LIMIT = 10_000  # largest page, window or seq range one call returns

Span = tuple[int, int]  # inclusive seq bounds


@dataclass(frozen=True, slots=True)
class _SummaryStats:
    summary: Summary
    count: int  # turns stored in the span
    ends_at: datetime | None  # latest created_at in the span (any kind)


class Navigator:
    """Read-only views over one store; never writes (reads do not even create threads)."""

    def __init__(self, store: Store, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.clock = clock

    # By id -----------------------------------------------------------------------------------
    def get_message(self, user_id: str, message_id: str, *, offset: int = 0) -> MessageView:
        """The message, its text from character `offset` (to page through a long one)."""
        offset = _whole("offset", offset, maximum=None)
        self.store.get_user(user_id)
        message = self.store.get_message(message_id, user_id=user_id)
        if offset and offset >= len(message.content):  # a page past the end is a caller's miscount, not a page
            raise InvalidInputError(f"offset {shown_number(offset)} is past the end of message {message_id!r} "
                                    f"({len(message.content)} characters): give an offset below that")
        return message_view(message, offset)

    def get_day(self, user_id: str, day_segment_id: str) -> DayView:
        """The day's summary (None until summarised) and its turns' ids in order."""
        segment = self._segment(user_id, day_segment_id)
        ids = self.store.history.turn_ids_of_day(segment.thread_id, segment.day_label)
        return DayView(
            day_segment_id=segment.day_segment_id, thread_id=segment.thread_id, day_label=segment.day_label,
            summary_markdown=segment.summary_markdown, updated_at=segment.updated_at,
            message_ids=tuple(ids),
        )

    def get_day_range(self, user_id: str, day_segment_id: str, from_message_id: str,
                      to_message_id: str) -> list[MessageView]:
        """The day's turns from one message to another, both included; both must be of that day."""
        segment = self._segment(user_id, day_segment_id)
        first = self._message_of_day(user_id, segment, "from_message_id", from_message_id)
        last = self._message_of_day(user_id, segment, "to_message_id", to_message_id)
        if first.seq > last.seq:
            raise InvalidInputError(
                f"the range is reversed: from_message_id {from_message_id!r} (seq {first.seq}) comes after "
                f"to_message_id {to_message_id!r} (seq {last.seq}); swap them"
            )
        found = self.store.history.turns_of_day(segment.thread_id, segment.day_label, first.seq, last.seq)
        return list(answer_views(found))

    # By time ---------------------------------------------------------------------------------
    def turns_since(self, user_id: str, timestamp: str | datetime, *, include_summaries: bool = True,
                    limit: int = SINCE_LIMIT, from_seq: int | None = None, thread_id: str | None = None) -> TurnsSince:
        """Turns at or after `timestamp` in order, and the summaries whose span ends after it.

        At most `limit` turns, and what one answer holds (ANSWER_CAP_CHARS, the summaries' share first);
        when more remain, `truncated` is set and the same call with `from_seq=next_seq` (and
        include_summaries=False) returns the rest exactly once.
        """
        limit = _whole("limit", limit, minimum=1)
        start_seq = 0 if from_seq is None else seq_number("from_seq", from_seq)
        user, thread = self._scope(user_id, thread_id)
        since = _moment(timestamp, user)
        rows = self.store.history.turns_since(thread, since, start_seq, limit + 1)
        every = self._summaries_ending_after(thread, since) if include_summaries else ()
        summaries = every[:fitting(map(_weight, every), ANSWER_CAP_CHARS // 2)]
        room = ANSWER_CAP_CHARS - sum(_weight(s) for s in summaries)
        shown = rows[:fitting(map(view_weight, rows[:limit]), room)]
        rest = rows[len(shown):]
        notes = [self._future_notice(since), _summaries_left(len(every) - len(summaries), since)]
        return TurnsSince(
            since=since, messages=tuple(message_view(m) for m in shown), summaries=summaries,
            truncated=bool(rest), next_seq=rest[0].seq if rest else None,
            next_timestamp=rest[0].created_at if rest else None,
            continue_with=_continue_hint(since, rest[0].seq) if rest else None,
            notice="; ".join(n for n in notes if n) or None,
        )

    def turns_around(self, user_id: str, timestamp: str | datetime, *, count: int = AROUND_COUNT,
                     before_ratio: float = AROUND_BEFORE_RATIO, thread_id: str | None = None) -> TurnsAround:
        """`int(count * ratio)` turns before the moment and the rest at or after it, in order.

        The ratio is a number from 0 to 1. When history has fewer turns on one side, that side is
        short and the other is NOT topped up: the window's shape depends only on the arguments.
        """
        count = _whole("count", count)
        ratio = _ratio(before_ratio)
        user, thread = self._scope(user_id, thread_id)
        moment = _moment(timestamp, user)
        want_before = int(count * ratio)
        want_after = count - want_before
        before = self.store.history.turns_before(thread, moment, want_before)
        after = self.store.history.turns_from(thread, moment, want_after)
        return TurnsAround(
            moment=moment, messages=answer_views([*reversed(before), *after]),
            before_count=len(before), after_count=len(after), requested_before=want_before,
            requested_after=want_after, notice=_short_notice(len(before), want_before, len(after), want_after),
        )

    # Context ---------------------------------------------------------------------------------
    def conversation_context(self, user_id: str, turns: int = CONTEXT_TURNS, *,
                             thread_id: str | None = None) -> ConversationContext:
        """The latest `turns` messages' worth of context: raw uncovered turns, then summaries.

        With at least `turns` uncovered turns, the most recent of them. Otherwise all uncovered
        turns plus the latest summaries (by the span they end at) until their real message counts
        reach `turns`; a summary wholly inside already-chosen ones is skipped and a partly
        overlapping one counts only its new messages, so nothing is counted twice.
        """
        turns = _whole("turns", turns)
        _, thread = self._scope(user_id, thread_id)
        uncovered = self.store.history.uncovered_turn_count(thread)
        raw = self.store.history.latest_uncovered_turns(thread, turns)[::-1]
        chosen = self._cover(thread, turns - len(raw)) if 0 < turns and uncovered < turns else ()
        covered = len(raw) + sum(s.message_count - s.overlap for s in chosen)
        return ConversationContext(
            requested_turns=turns, uncovered_count=uncovered, summaries=chosen,
            turns=answer_views(raw), turns_covered=covered,
        )

    # By seq and text -------------------------------------------------------------------------
    def messages_range(self, user_id: str, start_seq: int, end_seq: int, *,
                       thread_id: str | None = None) -> list[MessageView]:
        """Turns with start_seq <= seq < end_seq, in order (at most MAX_LIMIT seqs wide)."""
        start = seq_number("start_seq", start_seq)
        end = seq_number("end_seq", end_seq)
        if start > end:
            raise InvalidInputError(
                f"the range is reversed: start_seq {start} is after end_seq {end}; "
                "ranges are [start_seq, end_seq), so swap them"
            )
        if end - start > MAX_LIMIT:
            raise InvalidInputError(
                f"the range {start}..{end} is wider than {MAX_LIMIT} seqs: ask for it in pieces"
            )
        _, thread = self._scope(user_id, thread_id)
        return [message_view(m) for m in self.store.history.turns_between_seqs(thread, start, end)]

    def substring_search(self, user_id: str, text: str, *, limit: int = SUBSTRING_LIMIT,
                         thread_id: str | None = None) -> list[tuple[int, MessageView]]:
        """Turns containing `text` (case-insensitive, literal), in order, each with the character
        offset of its first match: `%`, `_`, quotes and regex syntax are plain text."""
        if not isinstance(text, str) or not text:
            raise InvalidInputError("substring search needs a non-empty text to look for")
        check_text("text", text)
        limit = _whole("limit", limit, minimum=1)
        _, thread = self._scope(user_id, thread_id)
        found = self.store.history.turns_containing(thread, text, limit)
        return [(_offset(m.content, text), view) for m, view in zip(found, answer_views(found))]

    # Helpers ---------------------------------------------------------------------------------
    def _scope(self, user_id: str, thread_id: str | None) -> tuple[User, str]:
        """The user and the thread to read; the continuous thread is not created by a read."""
        user = self.store.get_user(user_id)
        if thread_id is None:
            return user, continuous_thread_id(user_id)
        return user, self.store.get_thread(thread_id, user_id=user_id).thread_id

    def _segment(self, user_id: str, day_segment_id: str) -> DaySegment:
        self.store.get_user(user_id)
        return self.store.timeline.get_day_segment(day_segment_id, user_id=user_id)

    def _message_of_day(self, user_id: str, segment: DaySegment, name: str, message_id: str) -> Message:
        message = self.store.get_message(message_id, user_id=user_id)
        if message.thread_id != segment.thread_id or message.day_label != segment.day_label:
            raise InvalidInputError(
                f"{name} {message_id!r} is not in day {segment.day_segment_id!r}: it belongs to "
                f"{message.day_segment_id!r}; list the day's message ids with get_day (`convsearch get --day`)"
            )
        return message

    def _summary_stats(self, thread_id: str) -> list[_SummaryStats]:
        """Each summary with its real turn count and end time (messages may have been deleted). Two
        reads without the writer's lock: a summary written between them is not listed, and one
        dropped between them (a deletion, a rewrite) is left out rather than failing the call."""
        summaries = self.store.timeline.summaries(thread_id)
        stats = self.store.history.summary_turn_stats(thread_id)
        return [_SummaryStats(s, *stats[s.summary_id]) for s in summaries if s.summary_id in stats]

    def _summaries_ending_after(self, thread_id: str, since: datetime) -> tuple[SummaryView, ...]:
        return tuple(
            summary_view(st.summary, st.count, st.ends_at)
            for st in self._summary_stats(thread_id) if st.ends_at is not None and st.ends_at > since
        )

    def _cover(self, thread_id: str, needed: int) -> tuple[SummaryView, ...]:
        """Latest summaries first until `needed` messages are represented; returned oldest first."""
        ordered = sorted(self._summary_stats(thread_id),
                         key=lambda st: (-st.summary.to_seq, st.summary.from_seq, st.summary.summary_id))
        chosen: list[SummaryView] = []
        union: list[Span] = []
        got = 0
        for st in ordered:
            if got >= needed:
                break
            span = (st.summary.from_seq, st.summary.to_seq)
            gaps = _subtract(span, union)
            fresh = st.count if gaps == [span] else self.store.history.turn_count_in_spans(thread_id, gaps)
            if fresh == 0:
                continue  # already covered by a newer choice, or nothing stored in it
            chosen.append(summary_view(st.summary, st.count, st.ends_at, overlap=st.count - fresh))
            union = _merge(union, span)
            got += fresh
        return tuple(sorted(chosen, key=lambda v: (v.from_seq, v.to_seq)))

    def _future_notice(self, since: datetime) -> str | None:
        now = self.clock()
        if since <= now:
            return None
        return f"{since.isoformat()} is in the future (now is {now.isoformat()}): nothing can follow it yet"


def _whole(name: str, value: object, *, minimum: int = 0, maximum: int | None = MAX_LIMIT) -> int:
    """A whole number in range (at most MAX_LIMIT unless told otherwise)."""
    return whole_number(name, value, minimum=minimum, maximum=maximum, too_big=": page through instead")


def _ratio(value: object) -> float:
    """A share of the window: 2 or -1 is a mistake to report, not to clamp silently."""
    return check_unit_interval("before_ratio", value)


def _moment(timestamp: str | datetime, user: User) -> datetime:
    # parse_timestamp raises InvalidTimestampError listing the accepted forms with examples.
    return parse_timestamp(timestamp, zone(user.timezone))


def _weight(summary: SummaryView) -> int:
    """What a summary weighs in an answer, as a message view does (engine.query.navigation_results)."""
    return len(summary.markdown) + len(summary.title or "") + VIEW_FIELD_CHARS


def _summaries_left(left: int, since: datetime) -> str | None:
    if not left:
        return None
    return (f"{left} later summaries ending after {since.isoformat()} were left out to keep the answer small: "
            "ask again with a later timestamp for them")


def _continue_hint(since: datetime, next_seq: int) -> str:
    return (f"more turns follow: call turns_since again with timestamp '{since.isoformat()}', "
            f"from_seq={next_seq} and include_summaries=false (`convsearch since ... --from-seq {next_seq} "
            "--no-summaries`)")


def _short_notice(got_before: int, want_before: int, got_after: int, want_after: int) -> str | None:
    parts = []
    if got_before < want_before:
        parts.append(f"only {got_before} of {want_before} turns exist before the moment")
    if got_after < want_after:
        parts.append(f"only {got_after} of {want_after} turns exist at or after it")
    return "; ".join(parts) + " (the other side is not topped up)" if parts else None


def _offset(content: str, text: str) -> int:
    """Where `text` first occurs in `content`, ignoring case (0 if only the database's folding matched)."""
    match = re.search(re.escape(text), content, re.IGNORECASE)
    if match:
        return match.start()
    return max(content.lower().find(text.lower()), 0)


def _subtract(span: Span, union: list[Span]) -> list[Span]:
    """The parts of `span` outside `union` (sorted, disjoint, inclusive bounds)."""
    lo, hi = span
    gaps: list[Span] = []
    for a, b in union:
        if b < lo:
            continue
        if a > hi:
            break
        if a > lo:
            gaps.append((lo, a - 1))
        lo = b + 1
    if lo <= hi:
        gaps.append((lo, hi))
    return gaps


def _merge(union: list[Span], span: Span) -> list[Span]:
    merged: list[Span] = []
    for a, b in sorted([*union, span]):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged
