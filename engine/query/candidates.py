"""Query-time candidates from a user's shard: windows from BM25 and HNSW, then their messages.

Windows are what the indexes hold (context makes them findable); messages are what a search
returns. `window_candidates` scores the union of both top lists on both sides; `expand_to_messages`
turns the best windows into one entry per message, each carrying its best window as context.
Callers hold the shard's lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress
from typing import Mapping, Sequence

import numpy as np

from indexers.bm25_query import Bm25Match
from indexers.chunking import Window
from indexers.label_set import among
from indexers.shard import Shard
from indexers.distinct import distinct

__all__ = ["WindowCandidates", "MessageCandidates", "LexicalSide", "lexical_side", "query_idf", "window_candidates",
           "beside_candidates", "expand_to_messages"]

Intervals = Mapping[str, tuple[int, int]]  # thread -> (first seq, last seq) the filters allow
# idf can be <= 0 in a tiny corpus; a floor keeps "shares more query terms" meaningful there
IDF_FLOOR = 0.01


@dataclass(frozen=True, slots=True)
class WindowCandidates:
    labels: np.ndarray  # shard labels
    raw: np.ndarray  # raw BM25
    matched: np.ndarray  # shares a term with the query (or is in the BM25 top list)
    cosine: np.ndarray | None  # NaN where a window has no vector yet; None without a query vector
    held: np.ndarray  # (window, term of `terms`) booleans: which query terms each window holds
    terms: tuple[str, ...]  # the query's tokens the index knows, as `held`'s columns


@dataclass(frozen=True, slots=True)
class MessageCandidates:
    """One entry per message of the expanded windows, in order of its best window's score."""

    message_ids: tuple[str, ...]
    chunks: tuple[Window, ...]  # the best-scoring window holding the message: its context
    lines: tuple[int, ...]  # the message's line in that window
    windows: np.ndarray  # index into the window candidates of that window
    cosine: np.ndarray  # the message's own cosine with the query, NaN without a vector
    shared: np.ndarray  # query weight (idf) its own line shares
    tokens: tuple[frozenset[str], ...]  # the query's tokens its own line holds (with the speaker's label)
    thread_ids: tuple[str, ...]  # each message's thread and seq: what its summaries are looked up by
    seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LexicalSide:
    """A query's BM25 side of a shard: its top list, and its match for scoring the vector side's windows."""

    allowed: np.ndarray | None  # labels the filters allow; None: every label
    match: Bm25Match
    labels: np.ndarray  # the BM25 top list


def lexical_side(shard: Shard, tokens: Sequence[str], intervals: Intervals | None, depth: int) -> LexicalSide | None:
    """The BM25 top list within the filters, and the query's match; None when the filters allow no window."""
    allowed = shard.allowed(intervals) if intervals is not None else None
    if allowed is not None and not len(allowed):
        return None
    match = shard.bm25.match(tokens)
    labels = match.top(depth, allowed)[0] if tokens else np.zeros(0, dtype=np.int64)
    return LexicalSide(allowed, match, labels)


def query_idf(shard: Shard, tokens: Sequence[str]) -> dict[str, float]:
    """Each query token's weight for a message's own line (`expand_to_messages`)."""
    return {t: max(shard.bm25.max_score([t]), 0.0) + IDF_FLOOR for t in set(tokens)}


def window_candidates(shard: Shard, lexical: LexicalSide | None, vector: np.ndarray | None, mode: str,
                      depth: int) -> WindowCandidates:
    """Union of the BM25 and HNSW top lists (within the filters), each scored by both sides."""
    if lexical is None:
        return WindowCandidates(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=bool), None,
                                np.zeros((0, 0), dtype=bool), ())
    found = [lexical.labels] if mode != "vector" else []
    near, near_cosine = np.zeros(0, dtype=np.int64), np.zeros(0)
    if vector is not None and mode != "lexical" and shard.hnsw is not None and len(shard.hnsw) > 0:
        near, near_cosine = shard.hnsw.search(vector, depth, lexical.allowed)
        found.append(near)
    labels = distinct(np.concatenate(found)).astype(np.int64) if found else np.zeros(0, dtype=np.int64)
    cosine = np.full(len(labels), np.nan)
    cosine[np.searchsorted(labels, near)] = near_cosine  # the HNSW hits come with their exact cosine
    return _scored(shard, lexical, labels, vector, cosine)


def beside_candidates(shard: Shard, lexical: LexicalSide, found: WindowCandidates, order: np.ndarray, reach: int,
                      vector: np.ndarray | None) -> tuple[WindowCandidates, np.ndarray]:
    """`found` with the windows beside its `reach` best (`Shard.neighbours`, within the filters) that it
    lacks, scored the same way; and the indices of every window beside them that `order` (the windows to
    open, best first) lacks: the rules between turns can lift only a candidate."""
    next_to = shard.neighbours(found.labels[order[:reach]])
    if lexical.allowed is not None:
        next_to = np.intersect1d(next_to, lexical.allowed)
    missing = next_to[~among(next_to, found.labels)]  # both sorted and distinct: np.setdiff1d's result
    more = _scored(shard, lexical, missing, vector, np.full(len(missing), np.nan))
    cosine = None if found.cosine is None or more.cosine is None else np.concatenate((found.cosine, more.cosine))
    found = WindowCandidates(np.concatenate((found.labels, more.labels)), np.concatenate((found.raw, more.raw)),
                             np.concatenate((found.matched, more.matched)), cosine,
                             np.concatenate((found.held, more.held)), found.terms)
    beside = np.flatnonzero(among(found.labels, next_to))
    return found, beside[~np.isin(beside, order)]


def _scored(shard: Shard, lexical: LexicalSide, labels: np.ndarray, vector: np.ndarray | None,
            cosine: np.ndarray) -> WindowCandidates:
    """These windows with their raw BM25 and, given the query's vector, their cosine (NaN: no vector
    yet; read here where `cosine` is NaN)."""
    raw, held = lexical.match.scored_by_term(labels)
    matched = among(labels, lexical.labels) | (raw > 0)
    if vector is None:
        return WindowCandidates(labels, raw, matched, None, held, lexical.match.tokens)
    todo = np.isnan(cosine) & shard.has_vector.flags(labels)
    if todo.any():
        cosine[todo] = shard.hnsw.vectors(labels[todo]) @ vector
    return WindowCandidates(labels, raw, matched, cosine, held, lexical.match.tokens)


def _line_terms(shard: Shard, label: int, line: int, lines: int, held: frozenset[str]) -> frozenset[str]:
    """The query's tokens a window's line holds, of those the window holds (`held`, from its postings):
    all of them when the window is that one line."""
    if lines == 1 or not held:
        return held
    words = shard.line_tokens(label, line)
    return frozenset(t for t in held if t in words)


def expand_to_messages(shard: Shard, found: WindowCandidates, order: np.ndarray, tokens: Sequence[str],
                       vector: np.ndarray | None, idf: Mapping[str, float],
                       intervals: Intervals | None) -> MessageCandidates:
    """Every message the filters allow in the windows `found.labels[order]` (best first), each once.

    A message in two windows (they overlap) keeps the first, that is the better-scoring, one. The query
    terms a line holds are read off its window's postings when the window is that one line (most windows
    at 1M); only a kept message's line in a window of several lines that holds a term is tokenized.
    Tokenizing every line of each window that held a term cost ~0.7 ms a search at 1M.
    """
    wanted = sorted(set(tokens))  # a fixed order: the sum's float must not follow the process's hash seed
    seen: set[str] = set()
    ids: list[str] = []
    chunks: list[Window] = []
    lines: list[int] = []
    windows: list[int] = []
    shared: list[float] = []
    own_tokens: list[frozenset[str]] = []
    seqs: list[int] = []
    for index in order:
        label = int(found.labels[index])
        chunk = shard.chunks.window(label)
        span = intervals.get(chunk.thread_id) if intervals is not None else None
        held = frozenset(compress(found.terms, found.held[index].tolist()))
        for line, (message_id, seq) in enumerate(zip(chunk.message_ids, chunk.message_seqs)):
            if message_id in seen or (intervals is not None and (span is None or not span[0] <= seq <= span[1])):
                continue
            seen.add(message_id)
            ids.append(message_id)
            chunks.append(chunk)
            lines.append(line)
            windows.append(int(index))
            words = _line_terms(shard, label, line, len(chunk.message_ids), held)
            shared.append(sum(idf[t] for t in wanted if t in words))
            own_tokens.append(words)
            seqs.append(seq)
    cosine = (shard.message_vectors.similarities(ids, vector) if vector is not None and ids
              else np.full(len(ids), np.nan))
    return MessageCandidates(tuple(ids), tuple(chunks), tuple(lines), np.asarray(windows, dtype=np.int64),
                             np.asarray(cosine, dtype=np.float64), np.asarray(shared, dtype=np.float64), tuple(own_tokens),
                             tuple(c.thread_id for c in chunks), tuple(seqs))
