"""LoCoMo benchmark files: each LoCoMo conversation is a user, each of its sessions a conversation.

Each conversation's `sample_id` (e.g. "conv-26") becomes a user in UTC with one continuous
thread; the importer's `user_id` argument is ignored (the file names its users). Session N
starts at `session_N_date_time` with turns one minute apart; a turn keeps its `dia_id` as external
id (message id "<sample_id>:<dia_id>") and its speaker's name; speaker_a is "user", speaker_b
"assistant"; an image turn's caption is appended as " [image: ...]"; metadata keeps the session
number and any `img_url` (not the image `query`: an annotation, not something said). Sessions
with a date but no turns are skipped silently. Each session is its own ended conversation, and its
`session_summary` is stored as a "day" summary covering exactly its messages and as its day's
summary (summaries of sessions sharing a day are joined). A session dated before the end of the
previous one starts a minute after it instead, since threads are append-only in time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from engine.errors import ImportFileError, InvalidTimestampError
from engine.importers.appending import ingest_batches
from engine.importers.records import (
    BadRecord, ImportContext, Issues, Item, ThreadBatch, Totals, check_id, check_message, load_json,
)
from engine.models import Message, NewMessage, Summary, day_segment_id

__all__ = [
    "import_locomo", "load_locomo", "parse_locomo_datetime", "repair_evidence", "session_numbers",
    "locomo_message_id", "locomo_sessions", "LOCOMO_TIMEZONE", "TURN_GAP", "DATE_FORM",
]

LOCOMO_TIMEZONE = "UTC"
TURN_GAP = timedelta(minutes=1)
DATE_FORM = "'1:56 pm on 8 May, 2023'"
_DATE_TIME = re.compile(r"(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([a-z]+)\.?,?\s+(\d{4})", re.I)
_MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
                "october", "november", "december")
# Full names and 3-letter abbreviations (and "sept"), nothing looser: "Mayo" is not a month.
_MONTHS = {**{m: i for i, m in enumerate(_MONTH_NAMES, 1)}, **{m[:3]: i for i, m in enumerate(_MONTH_NAMES, 1)},
           "sept": 9}
_EVIDENCE = re.compile(r"d:?0*(\d+):0*(\d+)", re.I)


@dataclass(frozen=True, slots=True)
class _Session:
    user_id: str
    number: int
    start: datetime
    label: str  # the file's own date text, kept for the summary title
    items: tuple[Item, ...]
    summary: str | None


def load_locomo(path: str | Path) -> list[dict[str, Any]]:
    """The file's conversations, each with `sample_id`, `conversation` (and `qa`, summaries...)."""
    data = load_json(Path(path))
    if not isinstance(data, list):
        raise ImportFileError(f"{path} is not a LoCoMo file (a JSON list of conversations): check --format")
    for index, sample in enumerate(data):
        if not (isinstance(sample, dict) and isinstance(sample.get("sample_id"), str)
                and isinstance(sample.get("conversation"), dict)):
            raise ImportFileError("expected an object with sample_id and conversation: check --format",
                                  location=f"index {index}")
    return data


def locomo_message_id(sample_id: str, dia_id: str) -> str:
    """The message id a turn gets, so evidence dia_ids map to messages without a lookup."""
    return f"{sample_id}:{dia_id}"


def parse_locomo_datetime(text: object) -> datetime:
    """'1:56 pm on 8 May, 2023' as aware UTC (LoCoMo dates carry no zone)."""
    found = _DATE_TIME.fullmatch(text.strip()) if isinstance(text, str) else None
    month = _MONTHS.get(found.group(5).lower()) if found else None
    if found is None or month is None:
        raise InvalidTimestampError(f"cannot read LoCoMo date {text!r}: expected the form {DATE_FORM}")
    hour, minute, half, day, _, year = found.groups()
    if not 1 <= int(hour) <= 12:
        raise InvalidTimestampError(f"hour {hour} in {text!r} is not 1-12: expected the form {DATE_FORM}")
    hour24 = int(hour) % 12 + (12 if half.lower() == "p" else 0)
    try:
        return datetime(int(year), month, int(day), hour24, int(minute), tzinfo=timezone.utc)
    except ValueError as exc:
        raise InvalidTimestampError(f"LoCoMo date {text!r} is not a real date ({exc})") from None


def repair_evidence(ids: list[str]) -> tuple[list[str], list[str]]:
    """Clean `D<session>:<turn>` ids (split, fixed, deduplicated) and a note per change or drop."""
    clean: list[str] = []
    notes: list[str] = []
    for raw in ids:
        pieces = [p for p in re.split(r"[;,\s]+", str(raw)) if p]
        if len(pieces) > 1:
            notes.append(f"split {raw!r} into {', '.join(pieces)}")
        for piece in pieces or [str(raw)]:
            found = _EVIDENCE.fullmatch(piece)
            if found is None or int(found.group(1)) == 0 or int(found.group(2)) == 0:
                notes.append(f"dropped unrepairable evidence id {piece!r}")
                continue
            fixed = f"D{int(found.group(1))}:{int(found.group(2))}"
            if fixed != piece:
                notes.append(f"repaired {piece!r} to {fixed!r}")
            if fixed not in clean:
                clean.append(fixed)
    return clean, notes


def session_numbers(conversation: dict[str, Any]) -> list[int]:
    """Numbers of the sessions that hold turns, ascending."""
    found = (re.fullmatch(r"session_(\d+)", key) for key, value in conversation.items() if isinstance(value, list))
    return sorted(int(m.group(1)) for m in found if m and conversation[m.group(0)])


def locomo_sessions(samples: list[dict[str, Any]]) -> list[tuple[str, tuple[NewMessage, ...]]]:
    """(user id, turns) per session with turns, as the importer would store them, each user's in time
    order: what a replay through the live ingest path sends (a bad record raises ImportFileError)."""
    issues = Issues(skip_bad=False)
    return [(s.user_id, tuple(i.message for i in s.items)) for sample in samples
            for s in _sessions(issues, sample) if s.items]


def import_locomo(ctx: ImportContext) -> Totals:
    sessions = [s for sample in load_locomo(ctx.path) for s in _sessions(ctx.issues, sample)]
    runs = _runs([s for s in sessions if s.items], ctx.ingestor.idle_timeout)
    batches = [ThreadBatch(run[0].user_id, LOCOMO_TIMEZONE, None, tuple(i for s in run for i in s.items),
                           end_reason="session end") for run in runs]
    totals = ingest_batches(ctx, batches)
    inserted = {message_id for o in totals.outcomes for message_id in o.inserted}
    written = _store_summaries(ctx, sessions, inserted)
    _store_day_summaries(ctx, sessions, written)
    return replace(totals, summaries=len(written))


def _runs(sessions: list[_Session], idle_timeout: timedelta) -> list[list[_Session]]:
    """Sessions that one Ingestor call can take: the idle gap between them already ends each one.

    Far fewer calls than one per session (the dev file: 5 instead of 128); sessions closer than
    the idle timeout go in separate calls, each ended explicitly.
    """
    runs: list[list[_Session]] = []
    for session in sessions:
        last = runs[-1][-1] if runs else None
        if (last is None or last.user_id != session.user_id
                or session.items[0].message.created_at - last.items[-1].message.created_at <= idle_timeout):
            runs.append([session])
        else:
            runs[-1].append(session)
    return runs


def _sessions(issues: Issues, sample: dict[str, Any]) -> list[_Session]:
    """The sample's sessions in time order, each starting after the previous one ended."""
    sample_id, conversation = sample["sample_id"], sample["conversation"]
    try:
        check_id("sample_id", sample_id)
    except BadRecord as exc:
        issues.bad(str(sample_id)[:40], exc.reason)
        return []
    summaries = sample.get("session_summary") if isinstance(sample.get("session_summary"), dict) else {}
    dated = []
    for number in session_numbers(conversation):
        label = conversation.get(f"session_{number}_date_time")
        try:
            dated.append((parse_locomo_datetime(label), number, label))
        except InvalidTimestampError as exc:
            issues.bad(f"{sample_id} session_{number}_date_time", exc.message)
    sessions: list[_Session] = []
    next_free: datetime | None = None
    for start, number, label in sorted(dated):
        start = max(start, next_free) if next_free else start
        items = _turns(issues, sample_id, conversation, number, start)
        summary = summaries.get(f"session_{number}_summary")
        sessions.append(_Session(sample_id, number, start, label, tuple(items),
                                 summary if isinstance(summary, str) and summary.strip() else None))
        next_free = start + TURN_GAP * len(conversation[f"session_{number}"])
    return sessions


def _turns(issues: Issues, sample_id: str, conversation: dict[str, Any], number: int,
           start: datetime) -> list[Item]:
    roles = {conversation.get("speaker_a"): "user", conversation.get("speaker_b"): "assistant"}
    items = []
    for index, turn in enumerate(conversation[f"session_{number}"]):
        dia_id = turn.get("dia_id") if isinstance(turn, dict) else None
        location = f"{sample_id} {dia_id or f'session_{number}[{index}]'}"
        try:
            items.append(Item(location, _turn(sample_id, turn, roles, number, start + TURN_GAP * index)))
        except BadRecord as exc:
            issues.bad(location, exc.reason)
    return items


def _turn(sample_id: str, turn: Any, roles: dict[Any, str], number: int, at: datetime) -> NewMessage:
    if not isinstance(turn, dict):
        raise BadRecord(f"expected a turn object with speaker, dia_id and text, got {type(turn).__name__}")
    dia_id = check_id("dia_id", turn.get("dia_id"))
    speaker = turn.get("speaker")
    if speaker not in roles or speaker is None:
        raise BadRecord(f"speaker {speaker!r} is neither speaker_a nor speaker_b of the conversation")
    text, caption = turn.get("text"), turn.get("blip_caption")
    if not isinstance(text, str) and not isinstance(caption, str):
        raise BadRecord("turn has no text")
    content = " ".join(p for p in ((text or "").strip(), f"[image: {caption}]" if caption else "") if p)
    metadata: dict[str, Any] = {"session": number}
    if turn.get("img_url"):
        metadata["img_url"] = turn["img_url"]
    return check_message(NewMessage(roles[speaker], content, at, message_id=locomo_message_id(sample_id, dia_id),
                                    external_id=dia_id, speaker=speaker, metadata=metadata))


def _store_summaries(ctx: ImportContext, sessions: list[_Session], inserted: set[str]) -> list[Summary]:
    """Each newly stored session's summary as a "day" summary over exactly its messages."""
    written: list[Summary] = []
    for user_id in dict.fromkeys(s.user_id for s in sessions):
        mine = [s for s in sessions if s.user_id == user_id and s.summary
                and any(i.message.message_id in inserted for i in s.items)]
        ids = [i.message.message_id for s in mine for i in s.items]
        stored = {m.message_id: m for m in ctx.store.messages_by_ids(ids, user_id=user_id)} if ids else {}
        for session in mine:
            covered = sorted((stored[i.message.message_id] for i in session.items if i.message.message_id in stored),
                             key=lambda m: m.seq)
            written.append(_summary(ctx, session, covered))
            ctx.store.timeline.upsert_summary(written[-1])
    return written


def _summary(ctx: ImportContext, session: _Session, covered: list[Message]) -> Summary:
    first = covered[0]
    return Summary(
        summary_id=f"{first.thread_id}:sum:session:{session.number}", thread_id=first.thread_id,
        user_id=session.user_id, kind="day", from_seq=first.seq, to_seq=covered[-1].seq,
        markdown=session.summary or "", created_at=ctx.now, updated_at=ctx.now, day_label=session.start.date(),
        conversation_id=first.conversation_id, title=f"Session {session.number}: {session.label}",
        message_count=len(covered),
    )


def _store_day_summaries(ctx: ImportContext, sessions: list[_Session], written: list[Summary]) -> None:
    """Each touched day's summary: the summaries of all its sessions in the file, in time order."""
    touched = {(s.thread_id, s.user_id, s.day_label) for s in written}
    for thread_id, user_id, day in touched:
        texts = [s.summary for s in sessions if s.user_id == user_id and s.start.date() == day and s.summary]
        ctx.store.timeline.set_day_summary(day_segment_id(thread_id, day), "\n\n".join(texts), ctx.now)
