"""Context assembly: what a model sees of the continuous thread, within a token budget.

The default payload is today's raw messages (today in the user's zone; from the first message of
the conversation under way when it began before today) plus today's and yesterday's day summaries,
within conversation_max_context_tokens minus conversation_reserved_tokens. One policy fits the
window, `apply_context_window`: over budget, long tool outputs are cut to head and tail first, then
the first message (the one that set the scene) and the most recent ones that fit stay, with one
"[Earlier messages truncated]" marker where the middle was dropped; at most
conversation_max_history_messages are kept. A slice requested with `request_slice` replaces today's
window for the user's next assembly only; pending slices live in this process's memory (another
server process, or a restart, does not see them).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import Callable, Sequence, Union
from zoneinfo import ZoneInfo

from engine.config import Settings
from engine.errors import InvalidInputError, UnknownDaySegmentError
from engine.models import Conversation, Message, day_segment_id
from engine.query.navigation_results import VIEW_CAP_CHARS, capped_message
from engine.store.core import Store
from engine.store.placing import idle_past
from engine.summaries.policy import day_summary_id
from engine.timeutil import local_day, utcnow, zone
from engine.validation import seq_range, whole_number
from indexers.wordpieces import PROBE_CHARS_PER_TOKEN, WordPieceCounter

__all__ = [
    "TRUNCATION_TEXT",
    "Item",
    "TruncationMarker",
    "ContextPayload",
    "ContextAssembler",
    "apply_context_window",
    "smallest_budget",
    "format_conversation",
    "format_message",
    "trim_tool_output",
]

log = logging.getLogger("convsearch.context")
log.addHandler(logging.NullHandler())

TRUNCATION_TEXT = "[Earlier messages truncated]"
CONVERSATION_HEADING = "## Current Conversation"


@dataclass(frozen=True, slots=True)
class TruncationMarker:
    """Stands where messages were dropped from a window."""

    dropped: int
    text: str = TRUNCATION_TEXT


Item = Union[Message, TruncationMarker]


@dataclass(frozen=True, slots=True)
class ContextPayload:
    user_id: str
    thread_id: str
    day_label: date  # today in the user's zone
    source: str  # "today" or "slice"
    requested_slice: tuple[int, int] | None  # [start, end) when source is "slice"
    items: tuple[Item, ...]  # messages in order (tool outputs possibly trimmed), markers where dropped
    today_summary: str | None
    yesterday_summary: str | None
    text: str  # the whole prompt block
    max_tokens: int
    messages_loaded: int  # messages in the payload
    messages_dropped: int
    truncated: bool  # anything dropped or trimmed
    estimated_tokens: int  # tokens of `text`
    exact_tokens: bool  # counted with the real tokenizer (else chars/4)

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(i for i in self.items if isinstance(i, Message))


# Pure functions ----------------------------------------------------------------------------------
_LABELS = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"}


def format_message(item: Item, tz: ZoneInfo | None = None) -> str:
    """One message's line group: `[YYYY-MM-DD HH:MM] Role: content [used: a, b]`."""
    if isinstance(item, TruncationMarker):
        return item.text
    at = item.created_at.astimezone(tz) if tz else item.created_at
    label = _LABELS.get(item.role, item.role.capitalize())
    if item.speaker and item.speaker.lower() != item.role:
        label = f"{label} ({item.speaker})"
    used = f" [used: {', '.join(item.tools_used)}]" if item.tools_used else ""
    return f"[{at:%Y-%m-%d %H:%M}] {label}: {item.content}{used}"


def format_conversation(messages: Sequence[Item], tz: ZoneInfo | None = None) -> str:
    """The prompt block: `## Current Conversation`, then one line group per message (times in `tz`, default UTC)."""
    return "\n".join([CONVERSATION_HEADING, *(format_message(m, tz) for m in messages)])


def smallest_budget(counter: WordPieceCounter) -> int:
    """Tokens of the smallest block a budget must hold: the heading and the truncation marker, everything
    else dropped (summaries and messages go first)."""
    return counter.count(format_conversation([TruncationMarker(1)]))


def _too_small(max_tokens: int, least: int) -> InvalidInputError:
    return InvalidInputError(f"max_tokens must be at least {least}, got {max_tokens}: a context holds at least its "
                             f"heading and truncation marker ({least} tokens); ask for {least} or more")


def trim_tool_output(text: str, max_tokens: int, counter: WordPieceCounter) -> str:
    """`text` if it fits in `max_tokens`, else its head and tail around a placeholder, within `max_tokens`."""
    if counter.count_upto(text, max_tokens) <= max_tokens:
        return text
    head_spans, tail_spans = _edge_spans(text, max_tokens, counter)
    keep = max(max_tokens - counter.count(_placeholder(len(text))), 0)
    head, tail = min((keep + 1) // 2, len(head_spans)), min(keep // 2, len(tail_spans))
    while True:  # re-tokenising a cut piece can differ by a token at the cut: shrink until it fits
        first = text[: head_spans[head - 1][1]] if head else ""
        last = text[tail_spans[-tail][0]:] if tail else ""
        trimmed = f"{first}\n{_placeholder(len(text) - len(first) - len(last))}\n{last}".strip("\n")
        if counter.count(trimmed) <= max_tokens or head + tail == 0:
            return trimmed
        head, tail = (head - 1, tail) if head >= tail else (head, tail - 1)


_Spans = list[tuple[int, int]]


def _edge_spans(text: str, max_tokens: int, counter: WordPieceCounter) -> tuple[_Spans, _Spans]:
    """Token spans at the head and at the tail of `text`; a long text is only tokenised near its ends."""
    window = PROBE_CHARS_PER_TOKEN * max_tokens + 256
    if len(text) > 2 * window:
        head = counter.offsets(text[:window])[:-1]  # the last token may be a word cut in two
        start = len(text) - window
        tail = [(a + start, b + start) for a, b in counter.offsets(text[start:])[1:]]
        if len(head) >= max_tokens and len(tail) >= max_tokens:
            return head, tail
    spans = counter.offsets(text)
    return spans, spans


def _placeholder(omitted_chars: int) -> str:
    return f"[... {omitted_chars} characters omitted ...]"


def _newest_fitting(messages: Sequence[Message], room: int, counter: WordPieceCounter, tz: ZoneInfo | None = None,
                    transform: Callable[[Message], Message] | None = None) -> list[Message]:
    """The longest run of newest messages whose line groups fit in `room` tokens (counted newest first)."""
    kept: list[Message] = []
    for message in reversed(messages):
        message = transform(message) if transform else message
        cost = counter.count_upto(format_message(message, tz), room)
        if cost > room:
            break
        room -= cost
        kept.append(message)
    return kept[::-1]


def apply_context_window(messages: Sequence[Message], max_tokens: int, reserved_tokens: int = 4500, *,
                         counter: WordPieceCounter, tz: ZoneInfo | None = None) -> list[Item]:
    """Fit `format_conversation(result)` into max_tokens - reserved_tokens tokens.

    Everything fits: the messages unchanged. Otherwise the first message (the request that set the
    scene) and the most recent ones stay, and one marker replaces the dropped middle.
    """
    budget, least = max_tokens - reserved_tokens, smallest_budget(counter)
    if budget < least:
        raise InvalidInputError(
            f"max_tokens ({max_tokens}) must be greater than reserved_tokens ({reserved_tokens}) by at least "
            f"{least} tokens (the heading and truncation marker): raise max_tokens or reserve "
            "fewer tokens for the answer"
        )
    heading = counter.count(CONVERSATION_HEADING)
    if len(_newest_fitting(messages, budget - heading, counter, tz)) == len(messages):
        return list(messages)
    marker = counter.count(TRUNCATION_TEXT)
    room = budget - heading - marker
    first_cost = counter.count_upto(format_message(messages[0], tz), room)
    keep_first = first_cost <= room
    recent = _newest_fitting(messages[1:], room - first_cost if keep_first else room, counter, tz)
    return _shrink([messages[0]] if keep_first else [], recent, len(messages), budget, counter, tz)


def _shrink(first: list[Message], recent: list[Message], total: int, budget: int, counter: WordPieceCounter,
            tz: ZoneInfo | None = None) -> list[Item]:
    """Assemble first + marker + recent, dropping more (oldest recent, then first) until the block fits."""
    while True:
        window: list[Item] = [*first, TruncationMarker(total - len(first) - len(recent)), *recent]
        if _fits(window, budget, counter, tz) or not (first or recent):
            return window
        if recent:
            recent = recent[1:]
        else:
            first = []


def _fits(items: Sequence[Item], budget: int, counter: WordPieceCounter, tz: ZoneInfo | None = None) -> bool:
    return counter.count(format_conversation(items, tz)) <= budget


# Assembler -------------------------------------------------------------------------------------------
class ContextAssembler:
    def __init__(self, store: Store, counter: WordPieceCounter, settings: Settings, *,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.counter = counter
        self.settings = settings
        self.clock = clock
        self.least = smallest_budget(counter)  # the smallest budget an assembly takes
        self._slices: dict[str, tuple[int, int]] = {}  # per user, per process: see the module docstring
        self._lock = threading.Lock()

    def request_slice(self, user_id: str, start_seq: int, end_seq: int) -> None:
        """Make the user's next assembly use messages start_seq <= seq < end_seq instead of today's."""
        seq_range(start_seq, end_seq)
        thread = self.store.continuous_thread(user_id)  # unknown user: clear error now, not at the next assembly
        last, _ = self.store.thread_tail(thread.thread_id)
        if start_seq > last:  # it would be used up on an empty context
            raise InvalidInputError(f"the slice [{start_seq}, {end_seq}) starts after the thread's last message "
                                    f"(seq {last}): ask for seqs from 1 to {last}")
        with self._lock:
            self._slices[user_id] = (start_seq, end_seq)

    def default_payload(self, user_id: str, *, max_tokens: int | None = None) -> ContextPayload:
        """Today's window (or the pending slice, once) with today's and yesterday's summaries, within
        `max_tokens` (default: conversation_max_context_tokens minus conversation_reserved_tokens)."""
        settings = self.settings
        budget = (settings.conversation_max_context_tokens - settings.conversation_reserved_tokens
                  if max_tokens is None else max_tokens)
        whole_number("max_tokens", budget, minimum=1)
        if budget < self.least:
            raise _too_small(budget, self.least)
        user = self.store.get_user(user_id)
        thread_id = self.store.continuous_thread(user_id).thread_id
        tz = zone(user.timezone)
        today = local_day(self.clock(), tz)
        with self._lock:
            pending = self._slices.pop(user_id, None)
        if pending is not None:
            loaded = self.store.messages_in_range(thread_id, pending[0], pending[1], include_notes=False)
        else:
            loaded = self._current_messages(user_id, thread_id, today, tz)
        shown = [self._capped(m) for m in loaded]
        summaries = self._summaries(user_id, thread_id, today, budget)
        header = _header(summaries)
        window_budget = budget - self.counter.count(header + "\n\n") if header else budget
        items, trimmed = self._fit(shown, window_budget, tz)
        text = "\n\n".join(p for p in (header, format_conversation(items, tz)) if p)
        payload = ContextPayload(
            user_id=user_id, thread_id=thread_id, day_label=today, source="slice" if pending else "today",
            requested_slice=pending, items=tuple(items),
            today_summary=summaries[1][1], yesterday_summary=summaries[0][1],
            text=text, max_tokens=budget, messages_loaded=sum(isinstance(i, Message) for i in items),
            messages_dropped=len(loaded) - sum(isinstance(i, Message) for i in items),
            truncated=(trimmed or any(a is not b for a, b in zip(shown, loaded))
                       or any(isinstance(i, TruncationMarker) for i in items)),
            estimated_tokens=self.counter.count(text), exact_tokens=self.counter.exact,
        )
        _log_payload(payload, total_messages_in_db=self.store.message_count(thread_id))
        return payload

    def _current_messages(self, user_id: str, thread_id: str, today: date, tz: ZoneInfo) -> list[Message]:
        """Today's messages, and before them the rest of the conversation under way when it began
        before today: talk that crosses midnight keeps its turns (at 00:05, what was said at 23:55,
        which yesterday's summary holds only in brief). A conversation that has run for days is
        read from yesterday's first message on: the window keeps the latest turns anyway."""
        today_span = self._day_span(user_id, thread_id, today)  # None: nothing said today yet
        start, end = today_span if today_span is not None else (None, None)
        latest = self.store.timeline.last_conversation(thread_id)
        if latest is not None and self._under_way(latest[0]) and local_day(latest[0].started_at, tz) < today:
            yesterday = self._day_span(user_id, thread_id, today - timedelta(days=1))
            start = max(latest[0].first_seq, yesterday[0] if yesterday is not None else 0)
            end = end if end is not None else latest[0].last_seq + 1
        if start is None:
            return []
        return self.store.messages_in_range(thread_id, start, end, include_notes=False)

    def _day_span(self, user_id: str, thread_id: str, day: date) -> tuple[int, int] | None:
        """The day's seqs (start, end exclusive), None when nothing was said that day."""
        try:
            segment = self.store.timeline.get_day_segment(day_segment_id(thread_id, day), user_id=user_id)
        except UnknownDaySegmentError:
            return None
        return segment.starts_at_seq, segment.ends_at_seq + 1

    def _under_way(self, conversation: Conversation) -> bool:
        """Not ended, and its last message within the idle timeout of now (the next would continue it)."""
        idle = timedelta(minutes=self.settings.idle_timeout_minutes)
        return conversation.ended_at is None and not idle_past(conversation.last_message_at, self.clock(), idle)

    def _summaries(self, user_id: str, thread_id: str, today: date, budget: int) -> list[tuple[str, str | None]]:
        """[(heading, markdown)] for yesterday then today, each section (heading included) in a quarter of
        the budget or left out (None), and fewer while the window would not keep its smallest block."""
        out: list[tuple[str, str | None]] = []
        for heading, day in (("Yesterday's Summary", today - timedelta(days=1)), ("Today's Summary", today)):
            title = f"{heading} ({day.isoformat()})"
            found = self.store.timeline.get_summary(day_summary_id(thread_id, day), user_id=user_id)
            room = budget // 4 - self.counter.count(f"## {title}\n")
            body = trim_tool_output(found.markdown.strip(), room, self.counter) if found and room > 0 else None
            out.append((title, body if body and self.counter.count(body) <= room else None))
        for index in range(len(out)):  # yesterday's goes first
            header = _header(out)
            if not header or budget - self.counter.count(header + "\n\n") >= self.least:
                break
            out[index] = (out[index][0], None)
        return out

    def _fit(self, messages: list[Message], budget: int, tz: ZoneInfo) -> tuple[list[Item], bool]:
        """Fit the window: at most conversation_max_history_messages (the first and the most recent),
        long tool outputs trimmed first, then `apply_context_window`."""
        limit = self.settings.conversation_max_history_messages
        window = messages if len(messages) <= limit else [messages[0], *messages[len(messages) - limit + 1:]]
        if len(window) == len(messages) and self._block_tokens(window, tz) <= budget:
            return list(messages), False
        trimmed = [self._trim_tool(m) for m in window]
        items = apply_context_window(trimmed, budget, reserved_tokens=0, counter=self.counter, tz=tz)
        kept = [item for item in items if isinstance(item, Message)]
        while kept and self._block_tokens(_with_marker(kept, messages), tz) > budget:
            first_kept = kept[0].seq == messages[0].seq and len(kept) > 1
            kept = [kept[0], *kept[2:]] if first_kept else kept[1:]  # the history cut added a marker: drop more
        if not kept and messages:  # even the newest message alone is too long: keep its head and tail
            kept = self._squeeze(self._trim_tool(messages[-1]), budget, messages, tz)
        return _with_marker(kept, messages), True

    def _capped(self, message: Message) -> Message:
        """At most VIEW_CAP_CHARS of a message, as every result carries: a tool output's head and tail (its
        end is often the error), any other message's head with a marker saying how to read the rest."""
        if len(message.content) <= VIEW_CAP_CHARS:
            return message
        return capped_message(self._trim_tool(message))

    def _trim_tool(self, message: Message) -> Message:
        if message.role != "tool":
            return message
        return replace(message, content=trim_tool_output(message.content, self.settings.tool_output_cap_tokens,
                                                         self.counter))

    def _squeeze(self, message: Message, budget: int, messages: list[Message], tz: ZoneInfo) -> list[Message]:
        """The message's head and tail in what the block leaves; none when even its placeholder is too long."""
        room = budget - self._block_tokens(_with_marker([replace(message, content="")], messages), tz)
        if room <= 0:
            return []
        squeezed = [replace(message, content=trim_tool_output(message.content, room, self.counter))]
        return squeezed if self._block_tokens(_with_marker(squeezed, messages), tz) <= budget else []

    def _block_tokens(self, items: Sequence[Item], tz: ZoneInfo) -> int:
        return self.counter.count(format_conversation(items, tz))


def _header(summaries: Sequence[tuple[str, str | None]]) -> str:
    return "\n\n".join(f"## {title}\n{body}" for title, body in summaries if body)


def _with_marker(kept: list[Message], messages: list[Message]) -> list[Item]:
    """`kept` (a first run and a last run of `messages`) with one marker where the others were."""
    dropped = len(messages) - len(kept)
    if not dropped:
        return list(kept)
    gap = next((i for i, m in enumerate(kept) if m.seq != messages[i].seq), len(kept))
    return [*kept[:gap], TruncationMarker(dropped), *kept[gap:]]


def _log_payload(payload: ContextPayload, *, total_messages_in_db: int) -> None:
    log.info(
        "context.assembled user_id=%s source=%s messages_loaded=%d messages_dropped=%d total_messages_in_db=%d "
        "truncated=%s estimated_tokens=%d exact_tokens=%s max_tokens=%d",
        payload.user_id, payload.source, payload.messages_loaded, payload.messages_dropped, total_messages_in_db,
        payload.truncated, payload.estimated_tokens, payload.exact_tokens, payload.max_tokens,
    )
