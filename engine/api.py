"""ConversationEngine: the one facade the CLI, HTTP and MCP surfaces are thin layers over."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Literal, Mapping, Sequence

import numpy as np

from engine.collector import fewer_collections
from engine.config import Settings, data_dir
from engine.embedding_choice import documents_embedder, query_embedder
from engine.query.context import ContextAssembler, ContextPayload
from engine.query.days import DayBrowser, DayEntry, DayTimeline
from engine.maintenance.closing import catch_up, settle_import, summarise_and_index, summarize_users
from engine.maintenance.deletion import Deleter, deletion_report
from engine.maintenance.doctor import DoctorReport, RepairReport, diagnose, repair
from engine.maintenance.ray_reindex import rebuild_on_ray
from engine.errors import InvalidInputError
from engine.evaluation.overrides import RankingOverrides
from engine.facade_edges import (EveryUser, UsersToCheck, as_path, capped, checked_clock, file_errors,
                                 guarded_write, pipeline_params, to_new_message, to_new_messages)
from engine.locks import WriterLocks
from engine.importers import ImportReport, export_thread, export_thread_parquet, import_file
from engine.store.ingest import Ingestor
from engine.models import Conversation, ConversationEnd, IngestResult, NewMessage, Summary, Thread, User
from indexers.phases import Phases, per_second
from engine.query.navigation import Navigator
from engine.query.navigation_results import (AROUND_BEFORE_RATIO, AROUND_COUNT, CONTEXT_TURNS, SINCE_LIMIT, SUBSTRING_LIMIT,
                                             ConversationContext, DayView, MessageView, TurnsAround, TurnsSince)
from engine.query.search import Searcher
from engine.query.search_types import DEFAULT_LIMIT, KINDS, SearchMode, SearchResponse
from engine.store.core import STORE_FILENAME, Store
from engine.query.conversations import ConversationDetail, ConversationReader
from engine.summaries.policy import SummarizeReport, SummaryService
from engine.summaries.summarizers import make_summarizer
from engine.query.summary_index import SummaryIndex
from engine.timeutil import parse_day, utcnow
from indexers.embedders import DeadlineEmbedder, Embedder
from indexers.pipeline import IndexPipeline, IndexReport

if TYPE_CHECKING:
    from indexers.distributed import RayReindexReport

__all__ = ["ConversationEngine", "pipeline_params", "query_embedder", "to_new_message"]

log = logging.getLogger("convsearch")
Progress = Callable[[int, int], None]  # (done, total) callbacks, e.g. a progress bar


class ConversationEngine:
    """Store + indexes + query layer for one data directory."""

    def __init__(self, home: str | Path | None = None, *, settings: Settings | None = None,
                 clock: Callable[[], datetime] = utcnow, embedder: Embedder | None | Literal["auto"] = "auto") -> None:
        """The engine on data directory `home` (default: CONVSEARCH_HOME's), created when new. `embedder`:
        "auto" loads the configured backend (lexical only when it cannot load), None is lexical only."""
        self.settings = settings or Settings()
        self.home = data_dir(home)
        self.clock = clock = checked_clock(clock)
        self.store = Store(self.home / STORE_FILENAME)
        self.ingestor = Ingestor.of(self.store, self.settings, clock)
        if isinstance(embedder, str) and embedder != "auto":
            raise InvalidInputError(f'embedder must be an Embedder, None (lexical only) or "auto", got {embedder!r}')
        chosen = documents_embedder(self.settings) if isinstance(embedder, str) else embedder
        self.pipeline = IndexPipeline(self.store, self.home / "indexes", pipeline_params(self.settings), chosen)
        self.summary_index = SummaryIndex(self.pipeline, self.home / "summary_index")
        query = query_embedder(self.settings, chosen) if isinstance(embedder, str) else chosen
        self.searcher = Searcher(self.pipeline, self.summary_index, self.settings, clock=clock,
                                 query_embedder=DeadlineEmbedder(query) if query is not None else None)
        self._experiments: dict[tuple[tuple[str, Any], ...], Searcher] = {(): self.searcher}  # search_experiment's
        self.navigator = Navigator(self.store, clock=clock)
        counter = self.pipeline.counter  # one word memo for windows and prompt budgets
        self.summaries = SummaryService(self.store, make_summarizer(self.settings), self.settings, clock=clock,
                                        ingestor=self.ingestor, counter=counter)
        self.context = ContextAssembler(self.store, counter, self.settings, clock=clock)
        self.conversations = ConversationReader(self.store)
        # One writer per user at a time (DuckDB already allows one writer process); searches take no
        # writer lock, they read the shard under its own short lock.
        self.locks = WriterLocks()
        self.write_lock = EveryUser(self.locks)  # `with engine.write_lock:` holds every user's writes
        self.deleter = Deleter(self.store, self.pipeline, self.summary_index, self.summaries)
        self.days = DayBrowser(self.store, clock=clock)
        self._to_check = UsersToCheck()  # users `maintain` looks at besides the loaded ones

    def _writing(self, user_id: str | None = None) -> ContextManager[None]:
        """The user's writer lock (every user's when None), as every write runs (`guarded_write`)."""
        return guarded_write(self.locks.user(user_id) if isinstance(user_id, str) else self.locks.everyone())

    def close(self) -> None:
        """Close the store (the indexes hold no open files) and stop the summary workers; the engine is
        unusable after."""
        self.summaries.close()
        self.store.close()

    def __enter__(self) -> "ConversationEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Users and ingest -----------------------------------------------------------------------
    def add_user(self, user_id: str, timezone: str | None = None) -> User:
        """The user, created with `timezone` (default: the settings') when new; an existing one keeps its zone."""
        return self.store.ensure_user(user_id, self.settings.default_timezone if timezone is None else timezone)

    def ingest(self, user_id: str, messages: Sequence[NewMessage | Mapping[str, Any]], *,
               thread_id: str | None = None, index: bool = True) -> IngestResult:
        """Store messages; lexically searchable on return (an index not in memory catches up when next
        loaded), and embedded too when `index`."""
        batch = to_new_messages(messages)
        phase = Phases()
        with self._writing(user_id):
            self.store.get_user(user_id)  # a bad or unknown user fails here, before the index is opened
            first_label = self.pipeline.next_label(user_id) if index else 0  # before the store: loads the shard
            with phase("store"), self.summaries.storing(len(batch)) as fresh:
                result = self.ingestor.add_messages(user_id, batch, thread_id=thread_id)
            written = summarise_and_index(self, user_id, result, phase, fresh)
            if self.pipeline.loaded(user_id) is None:  # a server's background step indexes it
                self._to_check.add([user_id])
            if index:  # this batch's windows and summaries only: a backlog is the background step's
                with phase("embed"):
                    self.pipeline.embed_pending(user_id, from_label=first_label)
                    self.summary_index.embed_written(user_id, written)
                log.info("ingest user=%s new messages and summaries embedded", user_id)
        seconds = phase.elapsed()
        return replace(result, seconds=round(seconds, 4), messages_per_s=per_second(len(result.inserted), seconds),
                       phases_s=phase.seconds())

    # Deletion -------------------------------------------------------------------------------
    def delete_messages(self, user_id: str, message_ids: Sequence[str]) -> int:
        """Delete messages everywhere (store, summaries, indexes, cache); returns how many."""
        with self._writing(user_id):
            return self.deleter.delete_messages(user_id, message_ids).messages

    def delete_conversation(self, user_id: str, conversation_id: str) -> int:
        """Delete one conversation's messages everywhere, like delete_messages; returns how many."""
        with self._writing(user_id):
            return self.deleter.delete_conversations(user_id, [conversation_id]).messages

    def delete(self, user_id: str, *, message_ids: Sequence[str] | None = None, conversation_id: str | None = None,
               all_of_user: bool = False) -> dict[str, Any]:
        """Delete one of: messages, a conversation, or the user; a report of what went (and what was not found)."""
        return deletion_report(self, user_id, message_ids=message_ids, conversation_id=conversation_id,
                               all_of_user=all_of_user)

    def delete_user(self, user_id: str) -> int:
        """Forget the user: messages, summaries, shard and cached vectors; returns the messages deleted."""
        with self._writing(user_id):
            return self.deleter.delete_user(user_id)

    def end_conversation(self, user_id: str, reason: str = "explicit", *, thread_id: str | None = None) -> ConversationEnd:
        """End the open conversation (if one is); it gets a title and summary when a summarizer is configured."""
        with self._writing(user_id):
            ended = self.summaries.end_conversation(user_id, thread_id=thread_id, reason=reason)
            self.summary_index.embed_written(user_id, [ended.summary] if ended.summary else [])
        return ended

    def import_file(self, path: str | Path, *, fmt: str, user_id: str | None = None, timezone: str | None = None,
                    skip_bad: bool = False, progress: bool = False, update: bool = False) -> ImportReport:
        """Import a file (all-or-nothing unless skip_bad); imported users are lexically searchable at once.
        With `update`, a re-imported id whose text changed gets the new text, re-indexed."""
        phase = Phases()
        with file_errors(path), fewer_collections():  # once read, the file's users' locks: others write beside it
            log.info("import path=%s format=%s: reading and storing", path, fmt)
            with phase("store"), self.summaries.storing(None):
                report = import_file(self.store, self.ingestor, as_path(path), fmt=fmt, user_id=user_id,
                                     timezone=timezone or self.settings.default_timezone, skip_bad=skip_bad,
                                     progress=progress, update=update,
                                     hold=lambda users: guarded_write(self.locks.users(users)))
            log.info("import stored=%d duplicates=%d skipped=%d users=%s in %.2f s", report.inserted,
                     report.duplicates, len(report.skipped), ",".join(report.users), report.seconds)
        self._to_check.add(report.users)  # stored: the background step looks at them even if what follows fails
        report = settle_import(self, report, phase)  # each user under that user's lock alone
        seconds = phase.elapsed()
        return replace(report, seconds=round(seconds, 3), messages_per_s=per_second(report.inserted, seconds),
                       phases_s=phase.seconds())

    # Summaries on bulk paths and on a schedule ------------------------------------------------
    def summarize(self, user_id: str | None = None, *, since: str | None = None) -> SummarizeReport:
        """Backfill: apply the summary policy (and retention) to every day and ended conversation
        (from `since`, a YYYY-MM-DD day, on) that lacks an up-to-date summary; closes days that are over."""
        return self._summarize_users(user_id, since=parse_day(since) if since is not None else None)

    def finalize_days(self, user_id: str | None = None, *, now: datetime | None = None) -> SummarizeReport:
        """The scheduled close (a timer in `serve`, or cron running `convsearch summarize --finalize`):
        ends conversations idle past the timeout and closes each thread's last day once it is over."""
        return self._summarize_users(user_id, since=None, now=now or self.clock(), last_only=True)

    def _summarize_users(self, user_id: str | None, *, since: date | None, now: datetime | None = None,
                         last_only: bool = False) -> SummarizeReport:
        with self._writing(user_id):
            users = self.users(user_id)
            report = summarize_users(self, users, since=since, now=now, last_only=last_only)
            for user in users:
                self._summaries_written(user)
        return report

    def _summaries_written(self, user_id: str) -> None:
        """The engine's notes are messages: an index in memory takes them now, another when it next loads (the
        scheduled close reaches every user, and it loaded every user's shard). New summaries get vectors."""
        self.pipeline.refresh(user_id)
        if self.summary_index.embeds_pending(user_id):
            self.summary_index.embed_pending(user_id)

    def regenerate_day_summary(self, user_id: str, day_label: str | date, *, thread_id: str | None = None) -> Summary:
        """Rewrite one day's summary now ("Regenerate summary"); day_label is YYYY-MM-DD in the user's zone."""
        day = parse_day(day_label)
        with self._writing(user_id):
            summary = self.summaries.regenerate_day(user_id, day, thread_id=thread_id)
            self._summaries_written(user_id)
        return summary

    def export_parquet(self, user_id: str, path: str | Path, *, thread_id: str | None = None) -> int:
        """The thread as Parquet at `path` (the import format); returns the rows written."""
        with file_errors(path):
            return export_thread_parquet(self.store, user_id, as_path(path), thread_id=thread_id)

    def export(self, user_id: str, path: str | Path, *, thread_id: str | None = None) -> int:
        """The thread written as its file's extension says: .parquet, .jsonl or .csv."""
        with file_errors(path):
            return export_thread(self.store, user_id, as_path(path), thread_id=thread_id)

    # Indexes --------------------------------------------------------------------------------
    def users(self, user_id: str | None = None) -> list[str]:
        """User ids: `user_id` alone (checked to exist), else every user's."""
        return [self.store.get_user(user_id).user_id] if user_id else [u.user_id for u in self.store.list_users()]

    def index(self, user_id: str | None = None, *, progress: Progress | None = None) -> list[IndexReport]:
        """Embed what has no vector yet and save, one user at a time under that user's lock: the
        others keep writing meanwhile."""
        return self._each_user(user_id, progress, rebuild=False)

    def reindex(self, user_id: str | None = None, *, progress: Progress | None = None) -> list[IndexReport]:
        """Rebuild chunks, BM25 and vectors from the store, one user at a time like index."""
        return self._each_user(user_id, progress, rebuild=True)

    def _each_user(self, user_id: str | None, progress: Progress | None, *, rebuild: bool) -> list[IndexReport]:
        reports = []
        for user in self.users(user_id):
            with self._writing(user):
                log.info("%s user=%s", "reindex" if rebuild else "index", user)
                reports.append((self.pipeline.reindex if rebuild else self.pipeline.index)(user, progress=progress))
                if rebuild:  # summaries' vectors stay cached: their index is rebuilt from the cache
                    self.deleter.forget_unused_vectors(user)
                    self.summary_index.forget(user)
                self.summary_index.embed_pending(user)
        return reports

    def reindex_on_ray(self, user_id: str | None = None, *, address: str | None = None,
                       embed_actors: int | None = None, shards: str | None = None,
                       progress: Progress | None = None) -> RayReindexReport:
        """Rebuild on Ray (the `ray` extra; docs/scaling.md): this home's shards, or the
        shard storage at `shards` (a directory or an s3:// URL several machines reach). Users already
        at the target are skipped, so a rerun after a killed job resumes."""
        return rebuild_on_ray(self, self.users(user_id), address=address, embed_actors=embed_actors, shards=shards,
                              progress=progress)

    def diagnose(self) -> DoctorReport:
        """`convsearch doctor`: every problem found in the store and the shards on disk."""
        return diagnose(self)

    def repair(self, report: DoctorReport | None = None) -> RepairReport:
        """`doctor --repair`: rebuild broken indexes and clean crash leftovers (what is derived), then
        diagnose again; `report` is diagnosed now when omitted."""
        return repair(self, report)

    @staticmethod
    def holds_data(home: str | Path | None = None) -> bool:
        """Whether `home` (default: CONVSEARCH_HOME's) holds a store; opening one that does not creates it."""
        return (data_dir(home) / STORE_FILENAME).is_file()

    def maintain(self) -> list[str]:
        """One background step of a server: retry failed summaries, then catch up every user whose index
        or summaries lack vectors or a save (engine/maintenance/closing.py); a restart then replays at
        most one step's worth. Returns the users caught up."""
        for user in self.summaries.users_to_retry():  # each under its own lock: another's reindex holds no one up
            with self._writing(user):
                self.summaries.retry_failed(user)
        imported = self._to_check.take()
        # Users not loaded in memory change only by an import: check them all once, then the imported ones.
        candidates = set(self.users()) if imported is None else imported | self.pipeline.loaded_users()
        return [user for user in sorted(candidates) if catch_up(self, user)]

    def indexing_paused(self) -> ContextManager[None]:
        """Inside, embedding stops before its next batch, the rest left pending (a server's stop; done batches stay
        cached), and an index catch-up before its next piece: the next start does it from the store."""
        return self.pipeline.paused_while()

    # Search ---------------------------------------------------------------------------------
    def search(self, user_id: str, query: str, *, day: str | date | None = None, recency_days: float | None = None,
               start: str | datetime | None = None, end: str | datetime | None = None, limit: int = DEFAULT_LIMIT,
               min_score: float | None = None, kinds: Sequence[str] = KINDS, explain: bool = False,
               mode: SearchMode | None = None, fusion: str | None = None) -> SearchResponse:
        """conversation.search: the user's messages and summaries that best match `query` by meaning
        and keywords, summaries first, each hit citing a message. `day`, `recency_days`, `start` and
        `end` narrow it in time (a naive time is in the user's zone) before any cut; `min_score` drops
        weak hits; `explain` keeps each hit's score parts; `mode` and `fusion` default to hybrid and
        the settings' fusion."""
        return self._logged(user_id, self.searcher.search(
            user_id, query, day=day, recency_days=recency_days, start=start, end=end, limit=limit,
            min_score=min_score, kinds=kinds, explain=explain, mode=mode, fusion=fusion))

    def search_experiment(self, user_id: str, query: str, overrides: RankingOverrides, *, limit: int = DEFAULT_LIMIT,
                          kinds: Sequence[str] = KINDS, explain: bool = False, mode: SearchMode | None = None,
                          fusion: str | None = None) -> SearchResponse:
        """For ranking experiments only (the evaluation harness and benchmarks): `search` without
        filters, ranked with the ablation switches and settings of `overrides`. The engine's own
        settings are untouched, so experiments may run beside production searches."""
        key = tuple(sorted(overrides.settings.items()))  # validating Settings takes ~2 ms: once per experiment
        if key not in self._experiments:
            self._experiments[key] = Searcher(self.pipeline, self.summary_index, overrides.applied_to(self.settings),
                                              clock=self.clock, query_embedder=self.searcher.query_embedder)
        return self._logged(user_id, self._experiments[key].search(
            user_id, query, limit=limit, kinds=kinds, explain=explain, mode=mode, fusion=fusion, penalty=overrides.penalty,
            summary_context=overrides.summary_context))

    def top_windows(self, user_id: str, query: str, vector: np.ndarray, *, limit: int = DEFAULT_LIMIT) -> np.ndarray:
        """Diagnostic, for benchmarks: the search's core alone (BM25 and HNSW candidate lists, fused,
        with the query vector given), the best windows' labels; no messages, citations or store reads,
        which is what a naive design does, so the two compare like for like."""
        return self.searcher.top_windows(user_id, query, vector, limit=limit)

    @staticmethod
    def _logged(user_id: str, response: SearchResponse) -> SearchResponse:
        log.info("search user=%s mode=%s results=%d not_vector_indexed=%d took_ms=%.1f", user_id, response.mode,
                 len(response.results), response.not_vector_indexed, response.took_ms)
        return response

    # conversation.get and navigation ---------------------------------------------------------
    def get(self, user_id: str, *, message_id: str | None = None, day_segment_id: str | None = None,
            from_message_id: str | None = None, to_message_id: str | None = None,
            offset: int | None = None) -> MessageView | DayView | list[MessageView]:
        """conversation.get: a message (its text from `offset`), a day (summary and message ids), or a
        day's message range."""
        if message_id is not None:
            if day_segment_id is not None:
                raise InvalidInputError("give message_id or day_segment_id, not both")
            return self.navigator.get_message(user_id, message_id, offset=0 if offset is None else offset)
        if offset is not None:
            raise InvalidInputError("offset pages through one message's text: give it with message_id")
        if day_segment_id is None:
            raise InvalidInputError("give message_id, or day_segment_id (with from_message_id and to_message_id for a range)")
        if (from_message_id is None) != (to_message_id is None):
            raise InvalidInputError("a day range needs both from_message_id and to_message_id")
        if from_message_id is not None and to_message_id is not None:
            return self.navigator.get_day_range(user_id, day_segment_id, from_message_id, to_message_id)
        return self.navigator.get_day(user_id, day_segment_id)

    def turns_since(self, user_id: str, timestamp: str | datetime, *, include_summaries: bool = True,
                    limit: int = SINCE_LIMIT, from_seq: int | None = None, thread_id: str | None = None) -> TurnsSince:
        """What happened since a moment: turns at or after `timestamp`, in order, and the summaries
        ending after it; a truncated answer says how to continue (`from_seq=next_seq`)."""
        return self.navigator.turns_since(user_id, timestamp, include_summaries=include_summaries, limit=limit,
                                          from_seq=from_seq, thread_id=thread_id)

    def turns_around(self, user_id: str, timestamp: str | datetime, *, count: int = AROUND_COUNT,
                     before_ratio: float = AROUND_BEFORE_RATIO, thread_id: str | None = None) -> TurnsAround:
        """The turns around a moment: `count` of them, `before_ratio` of them before it; a short side
        stays short, so the window's shape depends only on the arguments."""
        return self.navigator.turns_around(user_id, timestamp, count=count, before_ratio=before_ratio,
                                           thread_id=thread_id)

    def conversation_context(self, user_id: str, turns: int = CONTEXT_TURNS, *,
                             thread_id: str | None = None) -> ConversationContext:
        """The latest `turns` messages' worth of context: the uncovered turns raw, older ones as the
        summaries that cover them, nothing counted twice."""
        return self.navigator.conversation_context(user_id, turns, thread_id=thread_id)

    def messages_range(self, user_id: str, start_seq: int, end_seq: int, *,
                       thread_id: str | None = None) -> list[MessageView]:
        """Turns with start_seq <= seq < end_seq, in order: a stretch of the thread by position."""
        return self.navigator.messages_range(user_id, start_seq, end_seq, thread_id=thread_id)

    def substring_search(self, user_id: str, text: str, *, limit: int = SUBSTRING_LIMIT,
                         thread_id: str | None = None) -> list[tuple[int, MessageView]]:
        """Exact strings (order numbers, error codes, quotes) that ranked search may miss: turns holding
        `text`, case-insensitive and literal, each with the offset of its first match."""
        return self.navigator.substring_search(user_id, text, limit=limit, thread_id=thread_id)

    # Summaries, conversations and context -----------------------------------------------------
    def summarize_range(self, user_id: str, start_seq: int, end_seq: int, *, thread_id: str | None = None) -> Summary:
        """A summary of the turns start_seq <= seq < end_seq, stored (kind "range") and searchable."""
        with self._writing(user_id):
            summary = self.summaries.summarize_message_range(user_id, start_seq, end_seq, thread_id=thread_id)
            self.summary_index.embed_written(user_id, [summary])
        return summary

    def list_conversations(self, user_id: str, limit: int = 10) -> list[Conversation]:
        """The user's latest `limit` conversations across threads: titles, summaries, times and spans."""
        return self.conversations.recent(user_id, limit)

    def get_conversation(self, user_id: str, conversation_id: str) -> ConversationDetail:
        """The conversation, each message's text capped at VIEW_CAP_CHARS with a marker saying how to get the rest."""
        detail = self.conversations.get(user_id, conversation_id)
        return replace(detail, messages=tuple(capped(m) for m in detail.messages))

    def request_context_slice(self, user_id: str, start_seq: int, end_seq: int) -> None:
        """Make the next assemble_context use turns start_seq <= seq < end_seq instead of today's (once)."""
        self.store.get_user(user_id)
        self.context.request_slice(user_id, start_seq, end_seq)

    def assemble_context(self, user_id: str, *, max_tokens: int | None = None) -> ContextPayload:
        """The context for the next model call: today's turns (or the requested slice) with today's and
        yesterday's summaries, within `max_tokens` (default: the settings' budget)."""
        return self.context.default_payload(user_id, max_tokens=max_tokens)

    def index_status(self, user_id: str) -> dict[str, Any]:
        """What the user's indexes hold and what is still waiting for vectors."""
        self.store.get_user(user_id)  # an unknown user is an error, not an empty shard
        shard = self.pipeline.shard(user_id)
        return {"user_id": user_id, "chunks": len(shard.chunks), "vector_indexed_chunks": len(shard.has_vector),
                "not_vector_indexed_messages": self.pipeline.pending_vector_messages(user_id),
                "watermarks": dict(shard.manifest.watermarks), "model": shard.manifest.spec.model,
                "schema_version": shard.manifest.spec.schema_version,
                "embedder": self.pipeline.embedder.name if self.pipeline.embedder else None,
                "query_embedder": self.searcher.query_embedder.name if self.searcher.query_embedder else None,
                "summaries": self.summary_retries()}

    def summary_retries(self) -> dict[str, object]:
        """Summaries whose summarizer failed and wait for a retry (the server's health check shows it)."""
        return self.summaries.retry_status()

    def stats(self, user_id: str | None = None) -> dict[str, int]:
        """Row counts per table (users, threads, messages, conversations, days, summaries), one user's or all."""
        if user_id is not None:
            self.store.get_user(user_id)
        return self.store.stats(user_id)

    def iter_users(self) -> Iterable[User]:
        """Every user record (id and timezone)."""
        return iter(self.store.list_users())

    def list_threads(self, user_id: str) -> list[Thread]:
        """The user's threads, oldest first: the continuous one and any imported or named ones."""
        self.store.get_user(user_id)
        return self.store.threads_of(user_id)

    # Days, as the web page reads them ------------------------------------------------------------
    def list_days(self, user_id: str, thread_id: str | None = None) -> list[DayEntry]:
        """The thread's days that have messages, oldest first (the web page's calendar)."""
        return self.days.list_days(user_id, thread_id)

    def day_timeline(self, user_id: str, day_label: str | date, *, thread_id: str | None = None) -> DayTimeline:
        """One day of the thread (YYYY-MM-DD or a date): its summary and every message, each marked with its covering summary."""
        return self.days.day_timeline(user_id, parse_day(day_label), thread_id)

    def today(self, user_id: str) -> date:
        """Today's date in the user's zone."""
        return self.days.today(user_id)
