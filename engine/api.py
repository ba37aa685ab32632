"""ConversationEngine: the one facade the CLI, HTTP and MCP surfaces are thin layers over."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from engine.config import Settings, data_dir
from engine.context import ContextAssembler, ContextPayload
from engine.days import DayBrowser, DayEntry, DayTimeline
from engine.deletion import Deleter
from engine.errors import EmbeddingUnavailableError, InvalidInputError
from engine.facade_edges import (EveryUser, as_path, by_thread, capped, disk_errors, file_errors, pipeline_params,
                                 to_new_message)
from engine.locks import WriterLocks
from engine.importers import ImportReport, export_thread, export_thread_parquet, import_file
from engine.ingest import Ingestor
from engine.models import Conversation, IngestResult, NewMessage, Summary, Thread, User
from indexers.phases import Phases, per_second
from engine.navigation import Navigator
from engine.navigation_results import ConversationContext, DayView, MessageView, TurnsAround, TurnsSince
from engine.search import Searcher
from engine.search_types import SearchResponse
from engine.store import STORE_FILENAME, Store
from engine.summaries import ConversationDetail, SummarizeReport, SummaryService
from engine.summarize import make_summarizer
from engine.summary_index import SummaryIndex
from engine.timeutil import parse_day, utcnow
from engine.tokens import TokenCounter
from indexers.embedders import DeadlineEmbedder, Embedder, load_embedder
from indexers.pipeline import IndexPipeline, IndexReport

if TYPE_CHECKING:
    from indexers.distributed import RayReindexReport

__all__ = ["ConversationEngine", "pipeline_params", "to_new_message"]

log = logging.getLogger("convsearch")


class ConversationEngine:
    """Store + indexes + query layer for one data directory."""

    def __init__(self, home: str | Path | None = None, *, settings: Settings | None = None,
                 clock: Callable[[], datetime] = utcnow, embedder: Embedder | None | str = "auto") -> None:
        self.settings = settings or Settings()
        self.home = data_dir(home)
        self.clock = clock
        self.store = Store(self.home / STORE_FILENAME)
        self.ingestor = Ingestor(self.store, idle_timeout=timedelta(minutes=self.settings.idle_timeout_minutes),
                                 clock=clock, future_tolerance=timedelta(hours=self.settings.future_tolerance_hours))
        chosen = self._embedder() if embedder == "auto" else embedder
        self.pipeline = IndexPipeline(self.store, self.home / "indexes", pipeline_params(self.settings), chosen)
        self.summary_index = SummaryIndex(self.pipeline)
        self.searcher = Searcher(self.pipeline, self.summary_index, self.settings, clock=clock,
                                 query_embedder=DeadlineEmbedder(chosen) if chosen is not None else None)
        self.navigator = Navigator(self.store, clock=clock)
        counter = TokenCounter()
        self.summaries = SummaryService(self.store, make_summarizer(self.settings), self.settings, clock=clock,
                                        ingestor=self.ingestor, counter=counter)
        self.context = ContextAssembler(self.store, counter, self.settings, clock=clock)
        # One writer per user at a time (DuckDB already allows one writer process); searches take no
        # writer lock, they read the shard under its own short lock.
        self.locks = WriterLocks()
        self.write_lock = EveryUser(self.locks)  # `with engine.write_lock:` holds every user's writes
        self.deleter = Deleter(self.store, self.pipeline, self.summary_index)
        self.days = DayBrowser(self.store, clock=clock)
        self._to_check: set[str] | None = None  # users `maintain` looks at besides the loaded ones (None: all)

    def _embedder(self) -> Embedder | None:
        try:
            return load_embedder(self.settings.embedding_backend, batch_size=self.settings.embed_batch_size)
        except EmbeddingUnavailableError as exc:
            log.warning("embedding.unavailable reason=%r fallback=lexical", exc.message)
            return None

    @contextmanager
    def _writing(self, user_id: str | None = None) -> Iterator[None]:
        """The user's writer lock (every user's when None); a full disk becomes StorageFullError."""
        with self.locks.user(user_id) if isinstance(user_id, str) else self.locks.everyone(), disk_errors():
            yield

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "ConversationEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Users and ingest -----------------------------------------------------------------------
    def add_user(self, user_id: str, timezone: str | None = None) -> User:
        return self.store.ensure_user(user_id, timezone or self.settings.default_timezone)

    def ingest(self, user_id: str, messages: Sequence[NewMessage | Mapping[str, Any]], *,
               thread_id: str | None = None, index: bool = True) -> IngestResult:
        """Store messages; they are lexically searchable on return, and embedded too when `index`."""
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
            raise InvalidInputError("messages must be a list of messages (objects with role and content)")
        batch = [to_new_message(m, index=i) for i, m in enumerate(messages)]
        phase = Phases()
        with self._writing(user_id):
            with phase("store"):
                result = self.ingestor.add_messages(user_id, batch, thread_id=thread_id)
            log.info("ingest user=%s thread=%s stored=%d duplicates=%d", user_id, result.thread_id,
                     len(result.inserted), len(result.duplicates))
            with phase("summaries"):
                self.summaries.after_ingest(user_id, result)
                self._apply_retention(user_id, result.thread_id)
            with phase("lexical"):
                self.pipeline.update_lexical(user_id)
            log.info("ingest user=%s lexical index updated", user_id)
            if index:
                with phase("embed"):
                    self.pipeline.embed_pending(user_id)
                log.info("ingest user=%s new messages embedded", user_id)
        seconds = phase.elapsed()
        return replace(result, seconds=round(seconds, 4), messages_per_s=per_second(len(result.inserted), seconds),
                       phases_s=phase.seconds())

    def _apply_retention(self, user_id: str, thread_id: str) -> None:
        """With max_conversations_retained set, the oldest ended conversations go, with all derived."""
        keep = self.settings.max_conversations_retained
        if keep is None:
            return
        for old in self.store.timeline.conversations(thread_id, ended_only=True)[keep:]:
            self.deleter.delete_conversation(user_id, old.conversation_id)

    # Deletion -------------------------------------------------------------------------------
    def delete_messages(self, user_id: str, message_ids: Sequence[str]) -> int:
        """Delete messages everywhere (store, summaries, indexes, cache); returns how many."""
        with self._writing(user_id):
            return self.deleter.delete_messages(user_id, message_ids)

    def delete_conversation(self, user_id: str, conversation_id: str) -> int:
        with self._writing(user_id):
            return self.deleter.delete_conversation(user_id, conversation_id)

    def delete(self, user_id: str, *, message_ids: Sequence[str] | None = None, conversation_id: str | None = None,
               all_of_user: bool = False) -> dict[str, Any]:
        """Delete one of: messages, a conversation, or the user; a report of what went (and what was not found)."""
        if sum((message_ids is not None, conversation_id is not None, bool(all_of_user))) != 1:
            raise InvalidInputError("give exactly one of message_ids, conversation_id or all_of_user")
        if all_of_user:
            return {"user_id": user_id, "deleted": "user", "messages_deleted": self.delete_user(user_id)}
        if conversation_id is not None:
            count = self.delete_conversation(user_id, conversation_id)
            return {"user_id": user_id, "deleted": "conversation", "conversation_id": conversation_id,
                    "messages_deleted": count}
        self.store.get_user(user_id)  # an unknown user is an error, not "0 deleted"
        wanted = list(message_ids or ())
        found = {m.message_id for m in self.store.messages_by_ids(wanted, user_id=user_id)}
        count = self.delete_messages(user_id, wanted)
        return {"user_id": user_id, "deleted": "messages", "message_ids": sorted(found),
                "not_found": sorted(set(wanted) - found), "messages_deleted": count}

    def delete_user(self, user_id: str) -> int:
        with self._writing(user_id):
            return self.deleter.delete_user(user_id)

    def end_conversation(self, user_id: str, reason: str = "explicit", *, thread_id: str | None = None) -> Summary | None:
        """End the open conversation; it gets a title and summary when a summarizer is configured."""
        with self._writing(user_id):
            return self.summaries.end_conversation(user_id, thread_id=thread_id, reason=reason)

    def import_file(self, path: str | Path, *, fmt: str, user_id: str | None = None, timezone: str | None = None,
                    skip_bad: bool = False, progress: bool = False, update: bool = False) -> ImportReport:
        """Import a file (all-or-nothing unless skip_bad); imported users are lexically searchable at once.
        With `update`, a re-imported id whose text changed gets the new text, re-indexed."""
        phase = Phases()
        with self._writing(), file_errors(path):
            log.info("import path=%s format=%s: reading and storing", path, fmt)
            with phase("store"):
                report = import_file(self.store, self.ingestor, as_path(path), fmt=fmt, user_id=user_id,
                                     timezone=timezone, skip_bad=skip_bad, progress=progress, update=update)
            with phase("rewrite"):
                for (user, thread), seqs in by_thread(report.rewritten).items():
                    self.pipeline.rewrite_messages(user, thread, seqs)
                    log.info("import user=%s thread=%s re-indexed %d replaced messages", user, thread, len(seqs))
            log.info("import stored=%d duplicates=%d skipped=%d users=%s in %.2f s", report.inserted,
                     report.duplicates, len(report.skipped), ",".join(report.users), report.seconds)
            with phase("summaries"):  # the same policy as live ingest, once per day
                made = self._summarize_users(report.users, since=None)
            report = replace(report, summaries=report.summaries + made.day_summaries + made.conversation_summaries)
            with phase("lexical"):
                for user in report.users:
                    self.pipeline.refresh(user)
                    log.info("import user=%s lexical index refreshed", user)
            if self._to_check is not None:
                self._to_check.update(report.users)
        seconds = phase.elapsed()
        return replace(report, seconds=round(seconds, 3), messages_per_s=per_second(report.inserted, seconds),
                       phases_s=phase.seconds())

    # Summaries on bulk paths and on a schedule ------------------------------------------------
    def summarize(self, user_id: str | None = None, *, since: str | None = None) -> SummarizeReport:
        """Backfill: apply the summary policy (and retention) to every day and ended conversation
        (from `since`, a YYYY-MM-DD day, on) that lacks an up-to-date summary; closes days that are over."""
        day = parse_day(since) if since is not None else None
        with self._writing(user_id):
            users = self.users(user_id)
            report = self._summarize_users(users, since=day)
            for user in users:
                self.pipeline.update_lexical(user)  # the engine's notes are messages too
        return report

    def finalize_days(self, user_id: str | None = None, *, now: datetime | None = None) -> SummarizeReport:
        """The scheduled close (a timer in `serve`, or cron running `convsearch summarize --finalize`):
        ends conversations idle past the timeout and closes each thread's last day once it is over."""
        with self._writing(user_id):
            users = self.users(user_id)
            report = self._summarize_users(users, since=None, now=now or self.clock(), last_only=True)
            for user in users:
                self.pipeline.update_lexical(user)
        return report

    def regenerate_day_summary(self, user_id: str, day_label: str | date, *, thread_id: str | None = None) -> Summary:
        """Rewrite one day's summary now ("Regenerate summary"); day_label is YYYY-MM-DD in the user's zone."""
        day = parse_day(day_label)
        with self._writing(user_id):
            summary = self.summaries.regenerate_day(user_id, day, thread_id=thread_id)
            self.pipeline.update_lexical(user_id)
        return summary

    def _summarize_users(self, users: Sequence[str], *, since, now: datetime | None = None,
                         last_only: bool = False) -> SummarizeReport:
        """Idle conversations end, retention applies (no summary is written for what goes), then each
        stale day and ended conversation is summarised once, days already over closed."""
        moment = now or self.clock()
        written: list[Summary] = []
        ended = 0
        for user in users:
            threads = self.store.threads_of(user)
            ended += sum(self.summaries.end_idle(t.thread_id, moment) for t in threads)
            self._apply_retention_all(user)
            for thread in threads:
                written += self.summaries.close_days(user, thread.thread_id, moment, since=since, last_only=last_only)
        return SummarizeReport.of(users, written, ended)

    def _apply_retention_all(self, user_id: str) -> None:
        for thread in self.store.threads_of(user_id):
            self._apply_retention(user_id, thread.thread_id)

    def export_parquet(self, user_id: str, path: str | Path, *, thread_id: str | None = None) -> int:
        with file_errors(path):
            return export_thread_parquet(self.store, user_id, as_path(path), thread_id=thread_id)

    def export(self, user_id: str, path: str | Path, *, thread_id: str | None = None) -> int:
        """The thread written as its file's extension says: .parquet, .jsonl or .csv."""
        with file_errors(path):
            return export_thread(self.store, user_id, as_path(path), thread_id=thread_id)

    # Indexes --------------------------------------------------------------------------------
    def users(self, user_id: str | None = None) -> list[str]:
        return [self.store.get_user(user_id).user_id] if user_id else [u.user_id for u in self.store.list_users()]

    def index(self, user_id: str | None = None, *, progress=None) -> list[IndexReport]:
        """One user at a time under that user's lock: the others keep writing meanwhile."""
        reports = []
        for user in self.users(user_id):
            with self._writing(user):
                log.info("index user=%s: embedding messages without vectors", user)
                reports.append(self.pipeline.index(user, progress=progress))
        return reports

    def reindex(self, user_id: str | None = None, *, progress=None) -> list[IndexReport]:
        """One user at a time under that user's lock, like index."""
        reports = []
        for user in self.users(user_id):
            with self._writing(user):
                log.info("reindex user=%s: rebuilding chunks, BM25 and vectors from the store", user)
                reports.append(self.pipeline.reindex(user, progress=progress))
                # summaries' vectors stay cached: their index is rebuilt from the cache, not re-embedded
                self.deleter.forget_unused_vectors(user)
                self.summary_index.forget(user)
        return reports

    def reindex_on_ray(self, user_id: str | None = None, *, address: str | None = None,
                       embed_actors: int | None = None, shards: str | None = None,
                       progress=None) -> RayReindexReport:
        """Rebuild on Ray (`pip install convsearch[ray]`; docs/scaling.md): this home's shards, or the
        shard storage at `shards` (a directory or an s3:// URL several machines reach). Users already
        at the target are skipped, so a rerun after a killed job resumes."""
        from indexers.distributed import RayOptions, reindex_on_ray  # only this job needs it
        from indexers.shard_storage import ShardStorage

        if self.pipeline.embedder is None or self.pipeline.cache is None:
            raise InvalidInputError("the Ray executor re-embeds: configure an embedding backend, or use `--executor local`")
        storage = ShardStorage(shards if shards is not None else self.pipeline.root)
        here = storage.local == self.pipeline.root.absolute()
        options = RayOptions(address=address, embed_actors=embed_actors, backend=self.settings.embedding_backend)
        users = self.users(user_id)
        with self.write_lock:
            try:
                report = reindex_on_ray(self.store, self.pipeline.cache, self.pipeline.params, self.pipeline.spec(),
                                        users, storage, options, progress)
            finally:
                for user in users if here else ():
                    self.pipeline.unload(user)  # its next use loads what the job published
            for rebuilt in report.rebuilt if here else ():
                self.deleter.forget_unused_vectors(rebuilt.user_id)
                self.summary_index.forget(rebuilt.user_id)
        return report

    def maintain(self) -> list[str]:
        """One background step of a server: users whose index changed since its last save, is behind
        the store, or has messages without vectors get `index` (embed, then save). A restart then
        replays at most one step's worth. Returns the users indexed."""
        with self.write_lock:
            self.summaries.retry_failed()
            imported, self._to_check = self._to_check, set()
        # Users not loaded in memory change only by an import: check them all once, then the imported ones.
        candidates = set(self.users()) if imported is None else imported | self.pipeline.loaded_users()
        done = []
        for user in sorted(candidates):
            if self.pipeline.needs_index(user):
                with self._writing(user):  # blocks this user's writes only
                    self.pipeline.index(user)
                done.append(user)
        return done

    # Search ---------------------------------------------------------------------------------
    def search(self, user_id: str, query: str, **options: Any) -> SearchResponse:
        response = self.searcher.search(user_id, query, **options)
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
        if from_message_id is not None:
            return self.navigator.get_day_range(user_id, day_segment_id, from_message_id, to_message_id)
        return self.navigator.get_day(user_id, day_segment_id)

    def turns_since(self, user_id: str, timestamp: str | datetime, **options: Any) -> TurnsSince:
        return self.navigator.turns_since(user_id, timestamp, **options)

    def turns_around(self, user_id: str, timestamp: str | datetime, **options: Any) -> TurnsAround:
        return self.navigator.turns_around(user_id, timestamp, **options)

    def conversation_context(self, user_id: str, turns: int = 40, **options: Any) -> ConversationContext:
        return self.navigator.conversation_context(user_id, turns, **options)

    def messages_range(self, user_id: str, start_seq: int, end_seq: int, **options: Any) -> list[MessageView]:
        return self.navigator.messages_range(user_id, start_seq, end_seq, **options)

    def substring_search(self, user_id: str, text: str, **options: Any) -> list[tuple[int, MessageView]]:
        return self.navigator.substring_search(user_id, text, **options)

    # Summaries, conversations and context -----------------------------------------------------
    def summarize_range(self, user_id: str, start_seq: int, end_seq: int, *, thread_id: str | None = None) -> Summary:
        return self.summaries.summarize_message_range(user_id, start_seq, end_seq, thread_id=thread_id)

    def list_conversations(self, user_id: str, limit: int = 10) -> list[Conversation]:
        return self.summaries.list_recent_conversations(user_id, limit)

    def get_conversation(self, user_id: str, conversation_id: str) -> ConversationDetail:
        """The conversation, each message's text capped at VIEW_CAP_CHARS with a marker saying how to get the rest."""
        detail = self.summaries.get_conversation(user_id, conversation_id)
        return replace(detail, messages=tuple(capped(m) for m in detail.messages))

    def request_context_slice(self, user_id: str, start_seq: int, end_seq: int) -> None:
        self.store.get_user(user_id)
        self.context.request_slice(user_id, start_seq, end_seq)

    def assemble_context(self, user_id: str, *, max_tokens: int | None = None) -> ContextPayload:
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
                "summaries": self.summaries.retry_status()}

    def stats(self, user_id: str | None = None) -> dict[str, int]:
        if user_id is not None:
            self.store.get_user(user_id)
        return self.store.stats(user_id)

    def iter_users(self) -> Iterable[User]:
        return iter(self.store.list_users())

    def list_threads(self, user_id: str) -> list[Thread]:
        """The user's threads, oldest first: the continuous one and any imported or named ones."""
        self.store.get_user(user_id)
        return self.store.threads_of(user_id)

    # Days, as the web page reads them ------------------------------------------------------------
    def list_days(self, user_id: str, thread_id: str | None = None) -> list[DayEntry]:
        return self.days.list_days(user_id, thread_id)

    def day_timeline(self, user_id: str, day_label: date, *, thread_id: str | None = None) -> DayTimeline:
        return self.days.day_timeline(user_id, day_label, thread_id)

    def today(self, user_id: str) -> date:
        return self.days.today(user_id)
