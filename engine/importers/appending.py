"""Appending an import's batches through the Ingestor, inside the transaction the import claims.

Each batch is sorted by time (stable, so file order breaks ties) and checked record by record
first, so a bad record can fail the import or be skipped alone. Short threads of a user go in
together, up to INGEST_CHUNK messages a call: a chat export holds thousands of conversations of a
few messages, one thread each, and appending them one at a time cost ~17 statements a thread.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Iterator

from tqdm import tqdm

from engine.errors import ConvsearchError, ImportFileError, InvalidInputError
from engine.importers.records import (BatchOutcome, ImportContext, Item, SkippedRecord, ThreadBatch, Totals,
                                      progress_bar)
from engine.models import IngestResult
from engine.store.core import continuous_thread_id, taken_thread
from engine.store.ingest import Append

__all__ = ["ingest_batches", "INGEST_CHUNK"]

INGEST_CHUNK = 10_000
"""Messages per Ingestor call: bounds each Arrow insert and keeps the bar moving. A call costs ~13
statements (~11 ms) besides its rows: at 1,000 a call they were a quarter of a 100k import's store
phase (4.4 s; 3.2-3.3 s at 10,000)."""


def ingest_batches(ctx: ImportContext, batches: Iterable[ThreadBatch]) -> Totals:
    """Append every batch (time-sorted) through the Ingestor, once the import has claimed its users
    and opened its transaction (`ctx.claim`).
    Short threads of a user go in together, up to INGEST_CHUNK messages a call (a chat export
    holds thousands of them); a longer one goes alone, a chunk at a time."""
    batches = list(batches)
    ctx.claim({b.user_id for b in batches})
    batches = [b for b in _claimed(ctx, batches) if b.items]
    users: dict[str, None] = {}
    threads: dict[str, None] = {}
    outcomes: list[BatchOutcome] = []
    with progress_bar(ctx.progress, sum(len(b.items) for b in batches), "ingest") as bar:
        for group in _groups(batches):
            users[group[0].user_id] = None
            for outcome in _ingest_group(ctx, group, bar):
                threads[outcome.thread_id] = None
                outcomes.append(outcome)
    return Totals(users=tuple(users), threads=tuple(threads), inserted=sum(len(o.inserted) for o in outcomes),
                  duplicates=sum(o.duplicates for o in outcomes), outcomes=tuple(outcomes))


def _groups(batches: list[ThreadBatch]) -> Iterator[list[ThreadBatch]]:
    """Runs of one user's batches holding at most INGEST_CHUNK messages in all (a longer batch
    alone), each thread once: a thread's next batch (a LoCoMo session) follows the one before."""
    group: list[ThreadBatch] = []
    for batch in batches:
        if group and (batch.user_id != group[0].user_id or batch.thread_id in {b.thread_id for b in group}
                      or sum(len(b.items) for b in group) + len(batch.items) > INGEST_CHUNK):
            yield group
            group = []
        group.append(batch)
    if group:
        yield group


def _ingest_group(ctx: ImportContext, group: list[ThreadBatch], bar: tqdm) -> list[BatchOutcome]:
    """One user's batches: their threads made, their records checked, then appended in one call
    (a batch longer than INGEST_CHUNK, alone here, in calls of that many)."""
    user_id = group[0].user_id
    ctx.store.ensure_user(user_id, group[0].timezone)
    _ensure_threads(ctx, group)
    thread_of = {id(b): b.thread_id or continuous_thread_id(user_id) for b in group}
    kept = _storable(ctx, group, [thread_of[id(b)] for b in group])
    calls = [[(batch, items) for batch, items in zip(group, kept) if items]]
    if len(group) == 1 and not group[0].as_conversation:  # one conversation must be one call
        calls = [[(group[0], kept[0][start:start + INGEST_CHUNK])] for start in range(0, len(kept[0]), INGEST_CHUNK)]
    results: dict[int, list[IngestResult]] = {id(b): [] for b in group}
    for call in [c for c in calls if c]:
        try:
            made = ctx.ingestor.append(user_id, [Append([i.message for i in items], batch.thread_id, batch.as_conversation)
                                                 for batch, items in call])
        except ConvsearchError as exc:  # e.g. older than what the stored thread already holds
            first, last = call[0][1][0].location, call[-1][1][-1].location
            where = first if first == last else f"{first} to {last}"
            names = " and ".join(dict.fromkeys(thread_of[id(batch)] for batch, _ in call))
            raise ImportFileError(f"thread {names}: {exc.message}; nothing was imported", location=where) from None
        for (batch, items), result in zip(call, made):
            results[id(batch)].append(result)
        bar.update(sum(len(items) for _, items in call))
    for batch in group:
        if batch.end_reason and any(r.inserted for r in results[id(batch)]):
            ctx.ingestor.end_conversation(thread_of[id(batch)], batch.end_reason)
    return [BatchOutcome(thread_id=thread_of[id(b)], inserted=tuple(i for r in results[id(b)] for i in r.inserted),
                         duplicates=sum(len(r.duplicates) for r in results[id(b)])) for b in group]


def _ensure_threads(ctx: ImportContext, group: list[ThreadBatch]) -> None:
    """The group's named threads, created when new; one another user has fails the import at its first record."""
    titles = {b.thread_id: b.title for b in group if b.thread_id is not None}
    try:
        taken = set(ctx.store.ensure_threads(group[0].user_id, titles))
    except InvalidInputError as exc:
        raise ImportFileError(f"{exc.message}; nothing was imported", location=group[0].items[0].location) from None
    for batch in group:
        if batch.thread_id in taken:
            raise ImportFileError(f"{taken_thread(batch.thread_id)}; nothing was imported", location=batch.items[0].location)


def _storable(ctx: ImportContext, group: list[ThreadBatch], threads: list[str]) -> list[list[Item]]:
    """Each batch's items (time-sorted) its thread can take: a time out of range, or older than the
    thread's stored history (duplicates aside), is a bad record: the import fails on it, or skips
    it with skip_bad."""
    user_id = group[0].user_id
    tails = ctx.store.thread_tails(threads)
    ordered = [sorted(b.items, key=lambda item: item.message.created_at) for b in group]
    fresh_by_thread = ctx.ingestor.fresh(user_id, {t: [i.message for i in items] for t, items in zip(threads, ordered)})
    fresh = {id(m) for messages in fresh_by_thread.values() for m in messages}
    by_id = {i.message.message_id: i for items in ordered for i in items if i.message.message_id and id(i.message) in fresh}
    kept_all = []
    for thread_id, items in zip(threads, ordered):
        _report_changed(ctx, user_id, thread_id, items, fresh, by_id)
        last_at = tails[thread_id][1]
        kept = []
        for item in items:
            at = item.message.created_at
            problem = ctx.ingestor.time_problem(at)
            if problem is None and last_at is not None and at < last_at and id(item.message) in fresh:
                problem = (f"{at.isoformat()} is older than the last message already stored in thread {thread_id} "
                           f"({last_at.isoformat()}): threads are appended in time order; import older history into "
                           "a thread of its own (a thread_id on its rows)")
            if problem is not None:
                ctx.issues.bad(item.location, f"created_at {problem}")
                continue
            kept.append(item)
        kept_all.append(kept)
    return kept_all


def _report_changed(ctx: ImportContext, user_id: str, thread_id: str, items: list[Item], fresh: set[int],
                    by_id: dict[str, Item]) -> None:
    """A re-imported id whose content differs from the stored message is reported, not silently counted;
    with `update` its text replaces the stored one (the caller re-indexes it). An id the file repeats
    with other content is reported too: its first record is the one stored (`by_id`: the first record
    of each message id in any of the user's threads; an external id is the thread's own)."""
    duplicates = [i for i in items if id(i.message) not in fresh]
    if not duplicates:
        return
    stored = ctx.store.stored_contents(thread_id, [i.message.message_id for i in duplicates if i.message.message_id],
                                       [i.message.external_id for i in duplicates if i.message.external_id])
    by_external = {i.message.external_id: i for i in items if id(i.message) in fresh and i.message.external_id}
    for item in duplicates:
        key = item.message.message_id or item.message.external_id
        earlier = by_id.get(key) if item.message.message_id else by_external.get(key) if key else None
        if key not in stored and earlier is not None and earlier.message.content != item.message.content:
            ctx.issues.changed.append(SkippedRecord(item.location, f"id {key!r} is also at {earlier.location} with other "
                                                                   "content: that first record is the one stored"))
        if key not in stored or stored[key][2] == item.message.content:
            continue
        message_id, seq, _ = stored[key]
        if ctx.update:
            ctx.store.replace_content(message_id, item.message.content)
            ctx.issues.rewritten.append((user_id, thread_id, seq))
        outcome = "replaced by the new text (--update)" if ctx.update else "the stored message was kept (--update replaces it)"
        ctx.issues.changed.append(SkippedRecord(item.location, f"id {key!r} is already stored with other content: "
                                                               + outcome))


def _claimed(ctx: ImportContext, batches: list[ThreadBatch]) -> list[ThreadBatch]:
    """Drop records whose message_id belongs to another user (in the store or earlier in the file)."""
    ids = [i.message.message_id for b in batches for i in b.items if i.message.message_id]
    owners = dict(ctx.store.existing_message_ids(set(ids))) if ids else {}
    kept_batches = []
    for batch in batches:
        kept = []
        for item in batch.items:
            mid = item.message.message_id
            owner = owners.setdefault(mid, batch.user_id) if mid else batch.user_id
            if owner != batch.user_id:
                ctx.issues.bad(item.location, f"message_id {mid!r} already belongs to another user: "
                                              "message ids are unique across the store, use external_id instead")
                continue
            kept.append(item)
        kept_batches.append(replace(batch, items=tuple(kept)))
    return kept_batches


