"""One query's BM25 over a `Bm25Index`: its top list and any document's score, both exact, reading
no more of the postings than the question needs.

Why: at 1M windows a query's common words have postings in the hundreds of thousands, and summing
all of them into a dense array of every document was most of a search's time (docs/benchmarks.md).
The top list first scores only the documents of the query's rarest term(s), the other terms' share
read off their postings by binary search (or by one walk over a term's postings when the candidates
are many against them: tens of thousands of binary searches made 1M's slowest queries); when the
k-th of those scores beats anything the other terms alone could give (their weights times k1 + 1:
MaxScore, Turtle & Flood 1995), no other document can enter the list; a document whose share
of its rarest term plus the commoner terms' bounds falls short of the k-th score so far is not
scored at all. Otherwise (one term, or rare terms too common), it sums every posting. A
document's sum always adds its terms in ascending term id, so both ways give the same floats. A
common term's stats (indexers/term_stats.py) tighten its bound to what its postings can really
add, and give candidates' frequencies straight from its column when it has one.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import InvalidInputError
from indexers.term_stats import TermStats

if TYPE_CHECKING:
    from indexers.bm25 import Bm25Index

__all__ = ["PostingSlice", "TermPostings", "Bm25Match"]

PRUNE_FROM = 65_536  # postings of all the query's terms: below it, summing them all is the cheaper way
RARE_BUDGET = 1 / 8  # the rarer terms' postings read to find the top k: at most this share of the documents
WALK_PER_ID = 16  # up to this many postings per id to score, a term's postings are walked, not searched
SORT_BELOW = 1 / 4  # postings under this share of the documents are summed by sorting them (at 1M: ~0.3)
SAMPLE_FROM, SAMPLE_STEP = 16_384, 16  # from this many scores, a top list's k-th is sought among those above a sample's
CEILING_MARGIN = 1 + 1e-9  # a frontier's share is summed in another order than a score: allow the rounding


@dataclass(frozen=True, slots=True)
class PostingSlice:
    """A term's postings in one segment, and its stats there if it is common enough to have them."""

    docs: np.ndarray  # internal ids, ascending
    tfs: np.ndarray
    stats: TermStats | None = None


@dataclass(frozen=True, slots=True)
class TermPostings:
    """A query term's weight (idf times its count in the query) and its postings, a slice per segment."""

    weight: float
    slices: tuple[PostingSlice, ...]

    @property
    def size(self) -> int:
        return sum(len(s.docs) for s in self.slices)


def contributions(weight: float, tfs: np.ndarray, docs: np.ndarray, norm: np.ndarray, k1: float) -> np.ndarray:
    """BM25's term share of each posting, `weight * (tf * (k1 + 1)) / (tf + norm[doc])`: the one
    expression both ways of scoring use, evaluated in place (the same floats, a third less time)."""
    tf = tfs.astype(np.float64)
    out = tf * (k1 + 1)
    out *= weight
    below = norm.take(docs)
    below += tf
    out /= below
    return out


@dataclass(frozen=True, slots=True)
class Bm25Match:
    """A query against the index as it stands (`Bm25Index.match`); valid until the index changes."""

    index: Bm25Index
    terms: tuple[TermPostings, ...]  # ascending term id
    tokens: tuple[str, ...]  # the query token of each term

    def top(self, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top k (labels, scores) among the matching documents (within `allowed`), best first;
        equal scores rank the larger label first."""
        k = operator.index(k)
        if k < 0:
            raise InvalidInputError(f"k must be >= 0, got {k}")
        if not self.terms or k == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        mask = self.index.allowed_mask(allowed) if allowed is not None else None
        found = self._pruned(k, mask)
        if found is None:
            docs, sums = self._summed()
            found = (docs[mask[docs]], sums[mask[docs]]) if mask is not None else (docs, sums)
        return self._best(k, *found)

    def scores_for(self, labels: np.ndarray) -> np.ndarray:
        """BM25 score of each given label (0 for no match or a label not indexed)."""
        return self.scored(labels)[0]

    def scored(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(score, shares a query term) of each given label; a label not indexed scores 0, unmatched.
        Many labels against few postings (a user's summaries) sum the postings once instead of a
        binary search per label and term; both add a document's terms in the same order. Every label in
        the index's order (a search's summaries, all of them) is the dense sum as it is: at 1M messages,
        gathering and masking its 60k rows again cost ~0.7 ms a search."""
        if self.index.holds_in_order(labels):
            return self._dense()
        ids = self.index.doc_ids(labels)
        if self._dense_is_cheaper(ids):
            dense, matched = self._dense()
            return np.where(ids >= 0, dense[ids], 0.0), (ids >= 0) & matched[ids]
        scores, held = self._sparse(ids)
        return scores, np.asarray(held.any(axis=1))

    def scored_by_term(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`scored`, with which of the terms (`tokens`) each label holds: a row of booleans. Why: a window
        of one line holds what its line holds, so a search need not tokenize that line to know it."""
        ids = self.index.doc_ids(labels)
        if self._dense_is_cheaper(ids):
            dense, _ = self._dense()
            return np.where(ids >= 0, dense[ids], 0.0), self._held_by_all(ids)
        return self._sparse(ids)

    def _dense_is_cheaper(self, ids: np.ndarray) -> bool:
        return len(ids) * len(self.terms) > sum(t.size for t in self.terms)

    def _sparse(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(score, terms held) of these internal ids (-1: not indexed), each distinct id scored once."""
        hit = ids >= 0
        out, held = np.zeros(len(ids), np.float64), np.zeros((len(ids), len(self.terms)), bool)
        distinct, inverse = np.unique(ids[hit], return_inverse=True)
        shares = np.zeros((len(distinct), len(self.terms)), bool)
        scores = self._scores_of(distinct, shares)
        out[hit], held[hit] = scores[inverse], shares[inverse]
        return out, held

    def _held_by_all(self, ids: np.ndarray) -> np.ndarray:
        """Which terms each of these internal ids (-1: none) holds, from every posting."""
        held = np.zeros((len(ids), len(self.terms)), bool)
        for j, term in enumerate(self.terms):
            for part in term.slices:
                held[:, j] |= np.isin(ids, part.docs)
        return held

    def _best(self, k: int, cand: np.ndarray, cand_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(cand) > k:  # keep everything tied with the k-th score so ties break by label
            keep = reaching_kth(cand_scores, k)
            cand, cand_scores = cand[keep], cand_scores[keep]
        labels = self.index.labels_at(cand)
        order = np.lexsort((labels, cand_scores))[::-1][:k]
        return labels[order], cand_scores[order]

    def _pruned(self, k: int, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        """(documents, scores) holding the whole top k, read from the rarest terms' documents only;
        None when no split of the terms shows it (then every posting is summed)."""
        n = len(self.index)
        if sum(t.size for t in self.terms) < PRUNE_FROM:
            return None
        ordered = sorted(self.terms, key=lambda t: t.size)
        ceilings = [self._ceiling(t) for t in ordered]
        cand, scores, read = np.zeros(0, np.int64), np.zeros(0, np.float64), 0
        seen = np.zeros(n, bool) if mask is None else ~mask  # scored already, or not allowed
        for split in range(1, len(ordered)):  # the rarest `split` terms say who may be in the top k
            term, rest = ordered[split - 1], sum(ceilings[split:])
            read += term.size
            if read > RARE_BUDGET * n:
                return None
            new = self._reaching(k, term, seen, scores, rest)
            # a document's score is whole (every term's share), so the earlier ones stay as they are
            cand, scores = np.concatenate((cand, new)), np.concatenate((scores, self._scores_of(new)))
            if len(cand) < k:
                continue
            keep = reaching_kth(scores, k)  # the final k-th is no lower: the others are out (ties stay, for the labels)
            cand, scores = cand[keep], scores[keep]
            if scores.min() > rest:  # the k-th, strictly: no outsider ties
                return cand, scores
        return None

    def _reaching(self, k: int, term: TermPostings, seen: np.ndarray, scores: np.ndarray, rest: float) -> np.ndarray:
        """`term`'s documents not yet seen that may still enter the top k, marking all of them seen.
        Why: such a document holds none of the rarer terms, so its score is at most its share of
        `term` plus the commoner terms' ceilings (`rest`). The final k-th score is at least the k-th
        among the candidates' `scores` and, when no term weighs less than nothing, these documents'
        shares (each a part of a score). Scoring every one whole made the slowest queries slow (at 1M,
        ~60-100k documents, nearly all short of the top list)."""
        docs = np.concatenate([s.docs for s in term.slices])  # distinct: a document lives in one segment
        fresh = ~seen[docs]
        docs = docs[fresh]
        seen[docs] = True
        norm, k1 = self.index.length_norm(), self.index.params.k1
        shares = contributions(term.weight, np.concatenate([s.tfs for s in term.slices])[fresh], docs, norm, k1)
        known = np.concatenate((scores, shares)) if all(t.weight >= 0 for t in self.terms) else scores
        if len(known) < k:
            return docs
        floor = kth_largest(known, k)
        return docs[shares + rest >= floor - abs(floor) * (CEILING_MARGIN - 1)]  # the sums' rounding kept in

    def _ceiling(self, term: TermPostings) -> float:
        """The most `term` can add to a document's score: its weight times k1 + 1 (the tf factor's
        limit), or, when each of its slices has stats, the share of their frontiers' best pair."""
        weight, k1 = max(term.weight, 0.0), self.index.params.k1
        stats = [part.stats for part in term.slices if part.stats is not None]
        if not weight or len(stats) < len(term.slices):
            return weight * (k1 + 1)
        pairs = np.array([pair for s in stats for pair in s.frontier], np.int64)
        tf = pairs[:, 0].astype(np.float64)
        share = float(np.max(tf * (k1 + 1) / (tf + self.index.norm_for(pairs[:, 1]))))
        return min(weight * share * CEILING_MARGIN, weight * (k1 + 1))

    def _scores_of(self, ids: np.ndarray, held: np.ndarray | None = None) -> np.ndarray:
        """The exact score of these distinct internal ids; in `held` (ids x terms), when given, which
        terms each holds (the top list's candidates need only scores: ~1 ms for 118k of them). Each
        term's share is read from its column, else found by binary search per id, or, when the term has
        few postings for that many ids, by walking its postings once (a search costs ~20x a posting's step)."""
        out = np.zeros(len(ids), np.float64)
        norm, k1 = self.index.length_norm(), self.index.params.k1
        rows: _Rows | None = None
        keys = ids.astype(np.int32)  # the postings' type: searching with another would copy the postings
        for j, term in enumerate(self.terms):  # ascending term id: the order the dense sum adds them in
            for part in term.slices:
                if part.stats is not None and part.stats.column is not None:
                    at, tfs = part.stats.column.frequencies(ids)
                elif len(part.docs) <= WALK_PER_ID * len(ids):
                    rows = rows or _Rows(ids, len(self.index))
                    at, found = rows.of(part.docs)
                    tfs = part.tfs[found]
                else:
                    pos = np.minimum(np.searchsorted(part.docs, keys), len(part.docs) - 1)
                    hit = part.docs[pos] == keys
                    at, tfs = np.flatnonzero(hit), part.tfs[pos[hit]]
                out[at] += contributions(term.weight, tfs, ids[at], norm, k1)
                if held is not None:
                    held[at, j] = True
        return out

    def _summed(self) -> tuple[np.ndarray, np.ndarray]:
        """(the documents matching any term, ascending; their scores): every posting summed per document.
        One term's postings in one segment are that already. Few postings against the documents
        (SORT_BELOW) are sorted by document rather than added into an array of every document, which
        cost a 1M-window search ~0.6 ms; the sort is stable, so a document's shares are still added in
        ascending term id."""
        if len(self.terms) == 1 and len(self.terms[0].slices) == 1:  # one term in one segment: already so
            docs, shares = self._postings()
            return docs.astype(np.int64), shares
        if sum(t.size for t in self.terms) >= SORT_BELOW * len(self.index):
            scores, matched = self._dense()
            docs = np.flatnonzero(matched)
            return docs, scores[docs]
        docs, shares = self._postings()
        order = np.argsort(docs, kind="stable")
        docs = docs[order].astype(np.int64)
        first = np.ones(len(docs), bool)
        np.not_equal(docs[1:], docs[:-1], out=first[1:])
        return docs[first], np.bincount(np.cumsum(first) - 1, weights=shares[order])

    def _dense(self) -> tuple[np.ndarray, np.ndarray]:
        """(score of every document, which match any term): every posting, summed per document."""
        docs, shares = self._postings()
        matched = np.zeros(len(self.index), bool)
        matched[docs] = True
        return np.bincount(docs, weights=shares, minlength=len(self.index)), matched

    def _postings(self) -> tuple[np.ndarray, np.ndarray]:
        """(document, share) of every posting of the query's terms, in ascending term id."""
        parts = [(t.weight, s) for t in self.terms for s in t.slices]
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        norm, k1 = self.index.length_norm(), self.index.params.k1
        return (np.concatenate([s.docs for _, s in parts]),
                np.concatenate([contributions(w, s.tfs, s.docs, norm, k1) for w, s in parts]))


def kth_largest(values: np.ndarray, k: int) -> float:
    """The k-th largest of `values` (0 < k <= len(values))."""
    return float(np.partition(values, len(values) - k)[len(values) - k])


def reaching_kth(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the scores at least the k-th largest (0 < k <= len(scores)), ascending. Why: a
    partition of every score took 2 ms for a common term's 253k documents at 1M; the scores at least
    a value sampled from every SAMPLE_STEP-th are few, and when they are k or more they hold the top k,
    so only they are partitioned (else all are)."""
    maybe = None
    if len(scores) >= SAMPLE_FROM:
        sample = scores[::SAMPLE_STEP]
        rank = min(len(sample), 2 * (k // SAMPLE_STEP + 1))  # about 2k scores above it, expected
        guess = kth_largest(sample, rank)
        maybe = np.flatnonzero(scores >= guess)
    if maybe is None or len(maybe) < k:
        maybe = np.arange(len(scores))
    found = scores[maybe]
    return maybe[found >= kth_largest(found, k)]


class _Rows:
    """Where each of some distinct internal ids sits in their array, for walking postings against them."""

    def __init__(self, ids: np.ndarray, n: int) -> None:
        self.wanted = np.zeros(n, bool)
        self.wanted[ids] = True
        self.row = np.empty(n, np.int32)  # read only where `wanted`
        self.row[ids] = np.arange(len(ids), dtype=np.int32)

    def of(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows in ids, positions in docs) of the postings whose document is one of the ids."""
        found = np.flatnonzero(self.wanted[docs])
        return self.row[docs[found]], found
