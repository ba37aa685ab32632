"""What ingest, the bulk paths, the scheduled close and a server's background step apply after
writes: retention, the summary policy (per batch, or once per stale day and ended conversation),
and the vectors and saves a user's index still lacks."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import date, datetime
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

import numpy as np

from engine.errors import IndexingPausedError
from engine.facade_edges import by_thread, disk_errors, guarded_write
from engine.importers import ImportReport
from engine.models import IngestResult, Summary
from engine.summaries.batch import FreshTurns
from engine.summaries.policy import SummarizeReport
from indexers.vector_slices import Sliced, embed_slice, keep_slice, plan_slice

if TYPE_CHECKING:
    from engine.api import ConversationEngine
    from indexers.phases import Phases

__all__ = ["apply_retention", "catch_up", "settle_import", "summarise_and_index", "summarize_users", "SUMMARY_SLICE",
           "WINDOW_SLICE"]

log = logging.getLogger("convsearch")
Planned = TypeVar("Planned", bound=Sliced)

# Summaries a background step embeds at a time, the model outside the user's lock.
SUMMARY_SLICE = 64
# Windows a background step embeds at a time, the model outside the user's lock: one call of ~240
# texts, long enough for the model to batch texts of similar lengths (16 a slice took 17 % longer).
WINDOW_SLICE = 96


def summarise_and_index(engine: ConversationEngine, user_id: str, result: IngestResult, phase: Phases,
                        fresh: FreshTurns | None = None) -> list[Summary]:
    """An ingested batch's summaries, retention and lexical update; the summaries written. A large
    batch's summaries are made in worker processes while this one indexes the batch; the day
    summaries' notes (messages too) are indexed after them. With retention on, the old order: what
    goes is never indexed. A shard not in memory is not loaded for this: it catches up when it
    loads, as after an import (the first search, or a server's background step)."""
    log.info("ingest user=%s thread=%s stored=%d duplicates=%d", user_id, result.thread_id, len(result.inserted),
             len(result.duplicates))
    written: list[Summary] = []
    with phase("summaries"):
        pending = engine.summaries.start_after_ingest(user_id, result, fresh)
        overlap = pending.in_workers and engine.settings.max_conversations_retained is None
        if not overlap:
            written = pending.finish()
            apply_retention(engine, user_id, result.thread_id)
    try:
        with phase("lexical"):
            engine.pipeline.refresh(user_id)
    finally:  # the summaries are written even when indexing fails, as they were before it
        if overlap:
            with phase("summaries"):
                written = pending.finish()
    if any(s.kind == "day" for s in written):
        with phase("lexical"):
            engine.pipeline.refresh(user_id)
    return written


def apply_retention(engine: ConversationEngine, user_id: str, thread_id: str) -> None:
    """With max_conversations_retained set, the oldest ended conversations go, with all derived."""
    keep = engine.settings.max_conversations_retained
    if keep is None:
        return
    old = engine.store.timeline.conversations(thread_id, ended_only=True)[keep:]
    if old:  # in one deletion: the days they share are summarised again once
        engine.deleter.delete_conversations(user_id, [c.conversation_id for c in old])


def summarize_users(engine: ConversationEngine, users: Sequence[str], *, since: date | None,
                    now: datetime | None = None, last_only: bool = False) -> SummarizeReport:
    """Idle conversations end, retention applies (no summary is written for what goes), then each
    stale day and ended conversation is summarised once, days already over closed."""
    moment = now or engine.clock()
    written: list[Summary] = []
    ended = 0
    for user in users:
        threads = [thread.thread_id for thread in engine.store.threads_of(user)]
        ended += engine.summaries.backfill.end_idle(threads, moment)
        for thread_id in threads:
            apply_retention(engine, user, thread_id)
        written += engine.summaries.backfill.close_days(user, threads, moment, since=since, last_only=last_only)
    return SummarizeReport.of(users, written, ended)


def settle_import(engine: ConversationEngine, report: ImportReport, phase: Phases) -> ImportReport:
    """What follows an import's store, a user at a time under that user's writer lock alone (the
    store took every user's: the file names its users as it is read), so another user's writes
    wait for the store's transaction only: the summaries quoting replaced text dropped, the summary
    policy once per day, an index in memory caught up. A user that fails (a full disk, say) does not
    stop the others: each is settled, then the first failure is raised (the messages are stored, and
    the background step catches the failed user's index up)."""
    replaced = by_thread(report.rewritten)
    made = 0
    failed: Exception | None = None
    for user in dict.fromkeys([*report.users, *(owner for owner, _ in replaced)]):
        try:
            made += _settle_user(engine, user, replaced, phase)
        except Exception as exc:  # noqa: BLE001 - raised below, after the other users
            log.warning("import user=%s not settled (%s: %s): its summaries wait for the scheduled close",
                        user, type(exc).__name__, exc)
            failed = failed or exc
    if failed is not None:
        raise failed
    return replace(report, summaries=report.summaries + made)


def _settle_user(engine: ConversationEngine, user: str, replaced: dict[tuple[str, str], set[int]], phase: Phases) -> int:
    """`settle_import` for one user, under its lock; the summaries written."""
    with guarded_write(engine.locks.user(user)):
        with phase("rewrite"):
            for (owner, thread), seqs in replaced.items():
                if owner == user:
                    engine.deleter.text_replaced(user, thread, seqs)  # its summaries go too
                    log.info("import user=%s thread=%s re-indexed %d replaced messages", user, thread, len(seqs))
        with phase("summaries"):  # the same policy as live ingest, once per day
            done = summarize_users(engine, [user], since=None)
        with phase("lexical"):
            engine.pipeline.refresh(user)
            log.info("import user=%s lexical index refreshed", user)
    return done.day_summaries + done.conversation_summaries


def catch_up(engine: ConversationEngine, user_id: str) -> bool:
    """Index the user (embed, then save) when the index changed since its last save, is behind the
    store or lacks vectors, and embed summaries without vectors; whether there was anything to do.
    Takes the user's lock only when there is, and embeds a backlog in slices, windows then
    summaries, the model outside the lock: a live ingest for that user waits for a slice's
    bookkeeping, not for the model. A stopping server (`indexing_paused`) leaves the lexical catch-up
    in progress between two pieces, and its next start catches up from the store."""
    if engine.pipeline.paused.is_set() and engine.pipeline.loaded(user_id) is None:
        return False  # a stopping server saves the shards it holds; it loads none (seconds at 1M)
    needs_index = engine.pipeline.needs_index(user_id)
    if not needs_index and not engine.summary_index.embeds_pending(user_id):
        return False
    try:
        if needs_index:
            _in_slices(engine, user_id, lambda: plan_slice(engine.pipeline, user_id, WINDOW_SLICE),
                       lambda planned, made: keep_slice(engine.pipeline, planned, made))
        _in_slices(engine, user_id, lambda: engine.summary_index.plan_slice(user_id, SUMMARY_SLICE),
                   engine.summary_index.keep_slice)
        with engine.locks.user(user_id), disk_errors():
            if needs_index:
                engine.pipeline.index(user_id)
            engine.summary_index.embed_pending(user_id)
    except IndexingPausedError:
        log.info("catch_up.paused user=%s: the next start indexes the rest from the store", user_id)
        return False
    return True


def _in_slices(engine: ConversationEngine, user_id: str, plan: Callable[[], Planned | None],
               keep: Callable[[Planned, dict[str, np.ndarray]], int]) -> None:
    """A backlog a slice at a time (indexers.vector_slices): `plan` under the user's lock, the model
    without it, `keep` under the lock again, until nothing is left or embedding is paused (a
    stopping server: nothing is planned then); writers waiting for the lock go first between slices."""
    while not engine.pipeline.paused.is_set():
        with engine.locks.user(user_id), disk_errors():  # a full disk: StorageFullError, as for any write
            planned = plan()
        made = embed_slice(engine.pipeline, planned) if planned is not None else None
        if planned is None or made is None:
            return
        with engine.locks.user(user_id), disk_errors():
            keep(planned, made)
        engine.locks.let_waiters_in(user_id)
