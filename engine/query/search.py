"""conversation.search: windows from BM25 and HNSW, fused; their messages scored; summaries merged.

Every query is scoped to one user's shard; filters become seq intervals applied before any
top-k cut; each list is taken `max(candidate_depth, 5 x limit)` deep so fusion has room. The
best windows are expanded into their messages, and each message is scored on its own line, its
window and the summary covering it (`engine.query.ranking.message_scores`): ranking messages rather
than citing one per window finds the turn that answers, not only the stretch that holds it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np

from engine.blas import limit_blas_threads
from engine.query.candidates import (Intervals, LexicalSide, MessageCandidates, WindowCandidates, expand_to_messages,
                                     lexical_side, query_idf, window_candidates, beside_candidates)
from engine.query.citation import make_snippet
from engine.config import Settings
from engine.errors import EmbeddingUnavailableError, InvalidInputError
from engine.text_rules import check_text, check_unit_interval
from engine.query.filters import SearchFilters, seq_intervals
from engine.models import day_segment_id
from engine.query.ranking import (FusedScores, ScoreParts, apply_penalty, favour_matching, favour_named_speakers, fuse,
                                  lead_bar, lift_reacted_to, lift_replies, merge_summaries_first, message_scores,
                                  names_speaker, own_lexical, own_scores, passes_floor, reply_lifts, tie_break_key,
                                  weigh_asking, with_phrases)
from engine.query.search_types import (DEFAULT_LIMIT, KINDS, LIMIT_RANGE, MAX_QUERY_CHARS, SearchHit, SearchMode,
                                       SearchResponse)
from engine.query.summary_hits import ScoredSummaries
from engine.query.summary_index import SummaryIndex, SummaryMatches
from engine.query.summary_spans import NO_COVERS
from engine.query.phrases import pair_weight, query_pairs
from engine.query.questions import asking_share, asks, ends_asking
from engine.query.time_phrases import QueryTime, read_dates
from engine.validation import whole_number
from indexers.embedders import DeadlineEmbedder, PendingVectors
from indexers.pipeline import IndexPipeline
from indexers.chunking import Window
from indexers.message_table import MessageCard
from indexers.shard import Shard

__all__ = ["Searcher", "replied_to"]

_WORD = re.compile(r"\w+")
# Candidate depths: enough windows that `limit` distinct messages survive fusion, filters and overlap.
WINDOWS_PER_RESULT = 5  # windows taken from each list per result asked (at least settings.candidate_depth)
EXPANDED_PER_RESULT, EXPANDED_EXTRA = 3, 10  # the best 3*limit + 10 fused windows are opened into messages
BESIDE_PER_RESULT = 2  # and the windows beside the best 2*limit (settings.neighbour_windows)


class _Windows(NamedTuple):
    found: WindowCandidates
    fused: FusedScores
    messages: MessageCandidates
    idf: Mapping[str, float]  # each query token's weight for a message's own line


@dataclass(frozen=True, slots=True)
class _Query:
    text: str
    tokens: list[str]
    vector: np.ndarray | None
    mode: SearchMode
    fusion: str
    when: QueryTime  # the dates the query names


class Searcher:
    def __init__(self, pipeline: IndexPipeline, summaries: SummaryIndex, settings: Settings, *,
                 clock: Callable[[], datetime], query_embedder: DeadlineEmbedder | None) -> None:
        self.pipeline = pipeline
        self.store = pipeline.store
        self.summaries = summaries
        self.settings = settings
        self.clock = clock
        self.query_embedder = query_embedder
        limit_blas_threads(settings.blas_threads)  # the process's: every product a search makes is small

    def search(self, user_id: str, query: str, *, day=None, recency_days=None, start=None, end=None,
               limit: int = DEFAULT_LIMIT, min_score: float | None = None, kinds: Sequence[str] = KINDS, explain: bool = False,
               mode: SearchMode | None = None, fusion: str | None = None, penalty: bool = True,
               summary_context: bool = True) -> SearchResponse:
        """`penalty` and `summary_context` off are for ranking experiments (ablations)."""
        began = time.perf_counter()
        text, limit, kinds = _check_query(query), _check_limit(limit), _check_kinds(kinds)
        if fusion not in (None, "weighted", "rrf"):
            raise InvalidInputError(f"fusion must be weighted or rrf (or None: the settings'), got {fusion!r}")
        if min_score is not None:
            min_score = check_unit_interval("min_score", min_score)
        user = self.store.get_user(user_id)
        filters = SearchFilters.parse(timezone=user.timezone, now=self.clock(), day=day,
                                      recency_days=recency_days, start=start, end=end)
        intervals = seq_intervals(self.store, user_id, filters)
        wants_context = summary_context and "message" in kinds and self.settings.summary_context_weight > 0
        reads_summaries = "summary" in kinds or wants_context
        shard = self._shard(user_id, reads_summaries, mode)
        # Counted before the mode is chosen: vectors that arrive meanwhile never leave a lexical answer unexplained.
        pending = self.pipeline.pending_vector_messages(user_id)
        embedding, notice = self._start_vector(text, shard, mode)  # the model runs while the keywords are matched
        when, dateless = read_dates(text)
        tokens = self._keywords(shard, text, dateless)
        matches = (self.summaries.match(user_id, tokens, intervals, with_vectors=embedding is not None)
                   if reads_summaries else None)
        lexical, seen = self._keyword_side(shard, tokens, intervals, limit, kinds)
        q, notice = self._query(text, tokens, embedding, notice, mode, fusion or self.settings.fusion, when)
        with shard.lock:
            if shard.changes != seen:  # written to while the model ran: match what is there now
                lexical, seen = self._keyword_side(shard, tokens, intervals, limit, kinds)
            windows = self._windows(shard, lexical, query_idf(shard, q.tokens), q, intervals, limit)
        scored = self._scored_summaries(matches, q, windows, limit)
        messages = (self._message_hits(user_id, shard, windows, q, limit, penalty, scored if wants_context else None)
                    if windows is not None else [])
        floor_of = [h for h in messages if passes_floor(h.parts, min_score)]
        summaries = (self._summary_hits(scored, q, limit, floor_of, shard, self.settings.summary_lead_margin)
                     if "summary" in kinds else [])
        summaries = [h for h in summaries if passes_floor(h.parts, min_score)]
        merged = (merge_summaries_first(summaries, floor_of, limit=limit, max_summaries=self.settings.max_summary_results)
                  if "message" in kinds else summaries[:limit])  # summaries alone: up to `limit` of them
        results = tuple(h if explain else replace(h, parts=None) for h in merged)
        return SearchResponse(
            query=text, results=results, mode=q.mode, not_vector_indexed=pending,
            took_ms=round((time.perf_counter() - began) * 1000, 2),
            notice=_pending_notice(notice, pending, user_id, q.mode, mode, self.query_embedder is not None),
            terms=tuple(dict.fromkeys(q.tokens)),
        )

    def _shard(self, user_id: str, with_summaries: bool, mode: SearchMode | None) -> Shard:
        """The user's shard; one not loaded yet loads while the user's summaries are read beside it."""
        if not with_summaries or self.pipeline.loaded(user_id) is not None:
            return self.pipeline.shard(user_id)
        return self.summaries.built_beside(user_id, lambda: self.pipeline.shard(user_id),
                                           with_vectors=mode != "lexical" and self.query_embedder is not None)

    # Query ----------------------------------------------------------------------------------
    def _start_vector(self, text: str, shard: Shard, mode: SearchMode | None) -> tuple[PendingVectors | None, str | None]:
        """The query's embedding, begun on the model's worker; None (and why, when a user should know)
        when the search goes without one."""
        if mode not in (None, "hybrid", "lexical", "vector"):
            raise InvalidInputError(f"mode must be hybrid, lexical or vector, got {mode!r}")
        if mode == "lexical":
            return None, None
        if self.query_embedder is None:
            return None, "embeddings are disabled: lexical search only"
        if shard.hnsw is None or not shard.has_vector:
            return None, None  # no vectors yet: a keyword search, and _pending_notice says what to run
        try:
            return self.query_embedder.start([text], self.settings.embedding_timeout_s), None
        except EmbeddingUnavailableError as exc:
            return None, f"lexical search only: {exc.message}"

    def _keywords(self, shard: Shard, text: str, dateless: str) -> list[str]:
        """The query's keywords, less the words of the dates it names (those rank by the turns' days) unless
        nothing else is left ("March 2024" alone) or `dates_as_keywords` keeps them."""
        tokens = [] if self.settings.dates_as_keywords or dateless == text else shard.tokenizer.tokenize(dateless)
        return tokens or shard.tokenizer.tokenize(text)  # a query without a date is tokenized once

    @staticmethod
    def _query(text: str, tokens: list[str], pending: PendingVectors | None, notice: str | None,
               mode: SearchMode | None, fusion: str, when: QueryTime) -> tuple[_Query, str | None]:
        """The query with its vector once the model is done; a keyword query when there is none."""
        vector = None
        if pending is not None:
            try:
                vector = pending.result()[0]
            except EmbeddingUnavailableError as exc:
                notice = f"lexical search only: {exc.message}"
        if not tokens:
            notice = "; ".join(filter(None, (notice, _keywordless_notice(by_meaning=vector is not None))))
        if vector is None:
            return _Query(text, tokens, None, "lexical", fusion, when), notice
        return _Query(text, tokens, vector, mode or "hybrid", fusion, when), notice

    def _keyword_side(self, shard: Shard, tokens: list[str], intervals: Intervals | None, limit: int,
                      kinds: Sequence[str]) -> tuple[LexicalSide | None, int]:
        """BM25's side of the search, and the shard's change count it was read at."""
        with shard.lock:
            found = lexical_side(shard, tokens, intervals, self._depth(limit)) if "message" in kinds else None
            return found, shard.changes

    # Messages -------------------------------------------------------------------------------
    def _windows(self, shard: Shard, lexical: LexicalSide | None, idf: Mapping[str, float], q: _Query,
                 intervals: Intervals | None, limit: int) -> _Windows | None:
        """The best windows of both lists, fused, opened into their messages (the caller holds the shard's lock)."""
        if lexical is None:
            return None
        found = window_candidates(shard, lexical, q.vector, q.mode, self._depth(limit))
        if not len(found.labels):
            return None
        fused = self._fuse(found.raw, found.matched, found.cosine, q)
        order = np.argsort(-fused.fused, kind="stable")[: EXPANDED_PER_RESULT * limit + EXPANDED_EXTRA]
        shard.chunks.prefetch(found.labels[order].tolist())  # read together when the disk is waited for
        if self.settings.neighbour_windows:  # opened after the best, best first: a message keeps its better window
            found, beside = beside_candidates(shard, lexical, found, order, BESIDE_PER_RESULT * limit, q.vector)
            shard.chunks.prefetch(found.labels[beside].tolist())
            fused = self._fuse(found.raw, found.matched, found.cosine, q)
            order = np.concatenate((order, beside[np.argsort(-fused.fused[beside], kind="stable")]))
        messages = expand_to_messages(shard, found, order, q.tokens, q.vector, idf, intervals)
        return _Windows(found, fused, messages, idf) if messages.message_ids else None

    def _message_hits(self, user_id: str, shard: Shard, windows: _Windows, q: _Query, limit: int, penalty: bool,
                      summaries: ScoredSummaries | None) -> list[SearchHit]:
        """Messages of the best windows, each scored on its own line, its window and its summary."""
        found, fused, messages, idf = windows
        window = fused.fused[messages.windows]
        cards = shard.messages.cards(messages.thread_ids, messages.seqs)
        lines = [_without_label(c.message_line(line), card.label) if card is not None else ""
                 for c, line, card in zip(messages.chunks, messages.lines, cards)]
        shared = self._with_phrases(messages, lines, q.tokens, idf, shard)
        own = own_scores(_own_cosines(messages, found.cosine), shared, mode=q.mode,
                         vector_weight=self.settings.vector_weight, lexical_weight=self.settings.lexical_weight)
        summary = summaries.covering() if summaries is not None else np.full(len(messages.seqs), np.nan)
        scores = message_scores(window, own, summary, own_weight=self.settings.message_own_weight,
                                summary_weight=self.settings.summary_context_weight,
                                context_cap=self.settings.message_context_cap)
        scores = self._turn_rules(scores, cards, lines, q)
        # context ranks a message but never makes it a hit: it must match on its own line too
        best = [i for i in np.argsort(-scores, kind="stable") if own[i] > 0][: limit + 10]  # the penalty may reorder these
        shown = [(i, card) for i in best if (card := cards[i]) is not None]  # None: deleted since the shard was read
        covered = self.summaries.spans(user_id).covered([c.thread_id for _, c in shown], [c.seq for _, c in shown])
        lexical = own_lexical(messages.shared)
        ranked = []
        for (i, card), is_covered in zip(shown, covered.tolist()):
            parts = fused.parts(messages.windows[i], fused=float(scores[i]), window=float(window[i]), own=float(own[i]),
                                summary=None if np.isnan(summary[i]) else float(summary[i]),
                                own_lexical=float(lexical[i]),
                                penalty=apply_penalty(is_covered, self.settings.covered_penalty) if penalty else 1.0)
            key = tie_break_key(round(parts.final, 6), card.day_label, card.created_at.timestamp())  # the hit's own
            ranked.append((key, i, card, parts, is_covered))
        ranked.sort(key=lambda r: r[0])  # before any snippet is made: only the `limit` shown need one
        return [self._hit(card, lines[i], messages.chunks[i], parts, is_covered, q)
                for _, i, card, parts, is_covered in ranked[:limit]]

    def _turn_rules(self, scores: np.ndarray, cards: Sequence[MessageCard | None], lines: Sequence[str],
                    q: _Query) -> np.ndarray:
        """The rules between turns: replies lifted by the match before them (more after a question), turns
        that ask weighed when the query asks, the turn a match reacts to lifted by it (after the weighing, which
        LOO preferred to before it), then a named participant's turns favoured (a reply weighs as its
        own speaker's turn: lifted the other way round, every reply to the named participant outranked the
        rest, which LOO rejected), then the turns of a date the query names."""
        previous = replied_to(cards)
        scores = self._question_rules(scores, previous, lines, asks(q.text))
        scores = lift_reacted_to(scores, previous, lift=self.settings.reacted_to_lift)
        words = frozenset(_WORD.findall(q.text.casefold()))
        named = np.array([card is not None and names_speaker(words, card.speaker) for card in cards], dtype=bool)
        scores = favour_named_speakers(scores, named, other_weight=self.settings.other_speaker_weight)
        if not q.when:
            return scores
        held = np.array([card is not None and q.when.holds(card.day_label) for card in cards], dtype=bool)
        return favour_matching(scores, held, other_weight=self.settings.outside_time_weight)

    def _with_phrases(self, messages: MessageCandidates, lines: Sequence[str], tokens: Sequence[str],
                      idf: Mapping[str, float], shard: Shard) -> np.ndarray:
        """`with_phrases`: each line's shared query weight, with the query's word pairs it holds side by side
        (only a line holding both words of a pair is tokenized, in order)."""
        pairs = query_pairs(tokens)
        if self.settings.phrase_weight <= 0 or not pairs:
            return messages.shared
        held = np.array([pair_weight(pairs, shard.tokenizer.tokenize(line), idf)
                         if any(a in words and b in words for a, b in pairs) else 0.0
                         for line, words in zip(lines, messages.tokens)])
        return with_phrases(messages.shared, held, weight=self.settings.phrase_weight)

    def _question_rules(self, scores: np.ndarray, previous: np.ndarray, lines: Sequence[str], query_asks: bool
                        ) -> np.ndarray:
        """`lift_replies`; when the query asks, the reply to a question by `question_reply_lift` (when higher),
        then `weigh_asking`. A query that does not ask (an id, a few words) keeps the plain lift: the turn
        holding "A-7731" must not tie with the reply to its closing question."""
        s = self.settings
        if not query_asks or (s.question_reply_lift <= s.reply_lift and s.question_turn_weight == 1.0):
            return lift_replies(scores, previous, lift=s.reply_lift)  # the text of the turns is not read
        ending = np.array([ends_asking(line) for line in lines], dtype=bool)
        after = np.where(previous >= 0, ending[np.maximum(previous, 0)], False)
        scores = lift_replies(scores, previous, lift=reply_lifts(after, lift=s.reply_lift,
                                                                  question_lift=s.question_reply_lift))
        share = np.array([asking_share(line) for line in lines])
        return weigh_asking(scores, share, weight=s.question_turn_weight)

    @staticmethod
    def _hit(card: MessageCard, text: str, chunk: Window, parts: ScoreParts, is_covered: bool, q: _Query) -> SearchHit:
        return SearchHit(
            kind="message", score=round(parts.final, 6), thread_id=card.thread_id, day_label=card.day_label,
            day_segment_id=day_segment_id(card.thread_id, card.day_label),
            snippet=make_snippet(text, q.text.split() + q.tokens), covered_by_summary=is_covered,
            from_seq=chunk.from_seq, to_seq=chunk.to_seq, message_id=card.message_id, seq=card.seq,
            created_at=card.created_at, role=card.role, speaker=card.speaker,
            first_message_id=chunk.message_ids[0], last_message_id=chunk.message_ids[-1], parts=parts,
        )

    def top_windows(self, user_id: str, query: str, vector: np.ndarray, *, limit: int) -> np.ndarray:
        """Diagnostic (benchmarks): the best windows' labels from the candidate lists and their fusion
        alone, hybrid with `vector` as the query's; no filters, messages, citations or store reads."""
        shard = self.pipeline.shard(user_id)
        q = _Query(query, shard.tokenizer.tokenize(query), vector, "hybrid", self.settings.fusion, QueryTime())
        with shard.lock:
            found = window_candidates(shard, lexical_side(shard, q.tokens, None, self._depth(limit)), q.vector,
                                      q.mode, self._depth(limit))
        fused = self._fuse(found.raw, found.matched, found.cosine, q)
        return found.labels[np.argsort(-fused.fused, kind="stable")[:limit]]

    def _depth(self, limit: int) -> int:
        """How deep each candidate list is taken for `limit` results."""
        return max(self.settings.candidate_depth, WINDOWS_PER_RESULT * limit)

    def _fuse(self, raw: np.ndarray, matched: np.ndarray, cosine: np.ndarray | None, q: _Query) -> FusedScores:
        return fuse(raw, matched, cosine, mode=q.mode, fusion=q.fusion, vector_weight=self.settings.vector_weight,
                    lexical_weight=self.settings.lexical_weight, rrf_k=self.settings.rrf_k)

    # Summaries ------------------------------------------------------------------------------
    def _scored_summaries(self, matches: SummaryMatches | None, q: _Query, windows: _Windows | None,
                          limit: int) -> ScoredSummaries | None:
        """The summaries the filters allow, fused like windows: hits, and context for messages. When
        messages were searched, only the candidates among them (`SummaryMatches.candidates`)."""
        if matches is None or not matches.summaries:
            return None
        covers = NO_COVERS
        if windows is not None:
            matches, covers = matches.candidates(windows.messages.thread_ids, windows.messages.seqs, self._depth(limit))
        fused = self._fuse(matches.lexical_raw, matches.matched, matches.cosine(q.vector), q)
        return ScoredSummaries(matches, fused, covers)

    @staticmethod
    def _summary_hits(summaries: ScoredSummaries | None, q: _Query, limit: int, messages: list[SearchHit], shard: Shard,
                      margin: float) -> list[SearchHit]:
        if summaries is None:
            return []
        return summaries.hits(lead_bar(messages[0].score if messages else None, margin), limit,
                              q.text.split() + q.tokens, shard)


def replied_to(cards: Sequence[MessageCard | None]) -> np.ndarray:
    """Each candidate's index of the candidate it replies to, -1 for none: the turn right before it in
    its thread and its conversation. A turn after a conversation ended (an idle gap, an explicit end)
    is no reply: a late "Good night." lifted by the match before it outranked that match once a
    summary covered the match."""
    at = {(c.thread_id, c.seq): (i, c) for i, c in enumerate(cards) if c is not None}
    previous = np.full(len(cards), -1, dtype=np.int64)
    for i, card in enumerate(cards):
        before = at.get((card.thread_id, card.seq - 1)) if card is not None else None
        if card is not None and before is not None and card.conversation == before[1].conversation:
            previous[i] = before[0]
    return previous


def _own_cosines(messages: MessageCandidates, window_cosine: np.ndarray | None) -> np.ndarray:
    """Each message's cosine; a window holding one message alone (a piece of a long tool output)
    is that message's own line, so its cosine counts for the message when it is higher."""
    if window_cosine is None:
        return messages.cosine
    alone = np.array([len(c.message_ids) == 1 for c in messages.chunks], dtype=bool)
    piece = np.where(alone, window_cosine[messages.windows], np.nan)
    return np.where(np.isnan(messages.cosine), piece, np.fmax(messages.cosine, piece))


def _without_label(line: str, label: str) -> str:
    """A window line without its "Speaker: " prefix: the message's indexed text, for the snippet."""
    prefix = f"{label}: "
    return line[len(prefix):] if line.startswith(prefix) else line


def _keywordless_notice(*, by_meaning: bool) -> str:
    """Why a query without one indexable word finds nothing by keyword, and where exact characters are found."""
    found = "these results match by meaning alone" if by_meaning else "a keyword search finds nothing"
    return ("no word of the query can be matched by keyword (emoji, symbols, one-letter words and stop words such "
            f"as 'the' are not indexed): {found}; search for words, or find exact characters with substring search "
            "(substring_search, `convsearch grep`, POST /api/search_session_history)")


def _pending_notice(notice: str | None, pending: int, user_id: str, ran: str, asked: str | None,
                    embedder: bool) -> str | None:
    """Say when messages were matched by keywords only because their vectors are pending, and what to run."""
    if notice is not None or not pending or not embedder or asked == "lexical":
        return notice
    fix = (f"a running `convsearch serve` embeds them within seconds; otherwise run `convsearch index --user {user_id}` "
           "(or POST /api/index)")
    if ran == "lexical":
        return f"lexical search only: none of the {pending} messages has a vector yet; {fix}"
    return f"{pending} messages have no vector yet and were matched by keywords only; {fix}"


def _check_query(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query is empty: give a few words to search for")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInputError(f"query is {len(query)} characters; the maximum is {MAX_QUERY_CHARS}: shorten it")
    return check_text("query", query.strip())


def _check_limit(limit: object) -> int:
    low, high = LIMIT_RANGE
    return whole_number("limit", limit, minimum=low, maximum=high)


def _check_kinds(kinds: object) -> tuple[str, ...]:
    if isinstance(kinds, str):
        kinds = (kinds,)
    chosen = tuple(kinds) if isinstance(kinds, (list, tuple)) else ()
    if not chosen or any(k not in KINDS for k in chosen):
        raise InvalidInputError(f"kinds must be a non-empty subset of {KINDS}, got {kinds!r}")
    return chosen
