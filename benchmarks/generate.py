"""A seeded generator of one user's long, continuous thread, for speed benchmarks at scale.

Shape (every draw comes from one `numpy.random.Generator`, so a seed gives the same thread, and a
shorter thread is a prefix of a longer one with the same seed):

* time: days with nights off and ~15% days off; each active day has a few sessions between
  07:00 and 23:00 UTC, separated by idle gaps longer than the engine's 30-minute timeout;
* sessions: a user turn, sometimes a tool call (~5% of messages, long outputs), an assistant turn;
* lengths: log-normal words per message (short user turns, longer replies, long tool outputs);
* words: real English (the MiniLM vocabulary, roughly frequency-ordered) under a Zipf law, mixed
  with English or French function words so stop words and stemming behave as on real text; each
  session has a topic (a fixed set of mid-frequency words) that its messages lean on, which is
  what gives `SyntheticEmbedder` its clusters;
* identifiers (order numbers, error codes, tickets, versions, hashes) sprinkled in and repeated,
  as people come back to the same order or error.

    python benchmarks/generate.py --n 1000 --seed 7 | head
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any, Iterator, Sequence

import numpy as np

__all__ = ["ThreadParams", "Vocabulary", "vocabulary", "iter_messages", "generate", "make_queries", "content_words",
           "SyntheticEmbedder"]

_EN_FUNCTION = ("the of and to a in is it that for you was on with as be this have are at not but or "
                "by from they we can if so do what there all will would about your when one my which "
                "me an just how our could been more also then into some has than them these did out").split()
_FR_FUNCTION = ("de la le et les des un une en du est pour que qui dans pas au sur ne plus par se ce il "
                "avec je nous vous mais on ou comme sont tout cette aux elle lui leur bien fait aussi").split()
_TOOLS = ("http_get", "sql_query", "shell", "search_docs", "read_file", "calendar")
_WORD_RE = re.compile(r"[a-z]{3,14}")
_TOPIC_WORDS = 120  # distinctive words per topic
DEFAULT_START = datetime(2022, 1, 3, tzinfo=timezone.utc)
LATEST_END = datetime(2026, 1, 1, tzinfo=timezone.utc)
MIN_MESSAGES_PER_DAY = 50  # below the ~55-80 a day generated, so a thread ends before LATEST_END
_TOPIC_BAND = (400, 16_000)  # vocabulary ranks topics draw from: neither ubiquitous nor ultra-rare


@dataclass(frozen=True, slots=True)
class ThreadParams:
    """What to generate; the defaults give ~80 messages per active day."""

    n_messages: int
    seed: int = 0
    topics: int = 300
    start: datetime | None = None  # None: DEFAULT_START, or earlier when the thread would reach LATEST_END
    sessions_per_day: float = 3.0  # mean of 1 + Poisson(sessions_per_day - 1)
    turns_per_session: float = 9.0  # log-normal median (a turn = user [+ tool] + assistant)
    tool_rate: float = 0.10  # tool calls per turn -> ~5% of messages
    identifier_rate: float = 0.04  # chance a user/assistant message mentions an identifier
    french_rate: float = 0.10  # sessions held in French
    user_id: str = "bench-user"

    def first_day(self) -> datetime:
        """Where the thread starts: early enough that it ends before LATEST_END, since ingest refuses
        times too far in the future (1M messages at ~80 a day span about 34 years)."""
        if self.start is not None:
            return self.start
        return min(DEFAULT_START, LATEST_END - timedelta(days=-(-self.n_messages // MIN_MESSAGES_PER_DAY)))


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Content words by Zipf rank, the topics' word lists, and the identifier pools."""

    words: np.ndarray  # object array of str, index = Zipf rank
    word_cdf: np.ndarray  # cumulative Zipf probabilities over `words`
    topic_words: np.ndarray  # (topics, _TOPIC_WORDS) indices into `words`
    topic_weights: np.ndarray  # Zipf probabilities of a topic being chosen for a session
    within_cdf: np.ndarray  # cumulative Zipf probabilities over a topic's words
    identifiers: np.ndarray  # object array of identifier strings (several kinds mixed)


def _base_words() -> list[str]:
    """Whole English words of MiniLM's vocabulary, in its (roughly by frequency) order.

    Real words keep WordPiece counts (hence window sizes) and stemming realistic; without the
    model package a syllable vocabulary stands in, which changes the text but not determinism.
    """
    try:
        from indexers.lexical import ENGLISH_STOPWORDS, FRENCH_STOPWORDS
        from indexers.model_files import minilm_dir

        stop = ENGLISH_STOPWORDS | FRENCH_STOPWORDS
        lines = (minilm_dir() / "vocab.txt").read_text(encoding="utf-8").split()
        words = [w for w in lines if _WORD_RE.fullmatch(w) and w not in stop]
        if len(words) > _TOPIC_BAND[1]:
            return words
    except Exception:  # the fallback keeps the generator usable anywhere
        pass
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    return [a + b + c for a in syllables for b in syllables for c in syllables[:30]][:20_000]


def _identifiers(rng: np.random.Generator, count: int) -> np.ndarray:
    """A pool of realistic identifiers: orders, error codes, tickets, versions, short hashes."""
    n = max(count // 5, 8)
    pools = [
        [f"ORD-{x:06d}" for x in rng.integers(100_000, 999_999, n)],
        [f"E{x:04d}" for x in rng.integers(1000, 9999, n)],
        [f"INC-{x}" for x in rng.integers(10_000, 99_999, n)],
        [f"v{a}.{b}.{c}" for a, b, c in rng.integers(0, 20, (n, 3))],
        [f"{x:08x}" for x in rng.integers(0, 2**32, n)],
    ]
    return np.array([x for pool in pools for x in pool], dtype=object)


def _zipf(n: int, exponent: float) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    return p / p.sum()


def _cdf(p: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    return cdf


def _draw(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    """Indices drawn by a precomputed CDF (rng.choice(p=...) rebuilds it on every call: too slow)."""
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), len(cdf) - 1)


_EN_ARRAY = np.array(_EN_FUNCTION, dtype=object)
_FR_ARRAY = np.array(_FR_FUNCTION, dtype=object)
_EN_CDF = _cdf(_zipf(len(_EN_FUNCTION), 1.0))
_FR_CDF = _cdf(_zipf(len(_FR_FUNCTION), 1.0))


@lru_cache(maxsize=8)
def vocabulary(seed: int = 0, topics: int = 300, identifiers: int = 2000) -> Vocabulary:
    """The thread's vocabulary for a seed (cached: the embedder and the generator share it)."""
    rng = np.random.default_rng([seed, 1])
    words = np.array(_base_words(), dtype=object)
    low, high = _TOPIC_BAND[0], min(_TOPIC_BAND[1], len(words))
    topic_words = np.stack([rng.choice(np.arange(low, high), _TOPIC_WORDS, replace=False) for _ in range(topics)])
    return Vocabulary(
        words=words, word_cdf=_cdf(_zipf(len(words), 1.05)), topic_words=topic_words,
        topic_weights=_zipf(topics, 0.8), within_cdf=_cdf(_zipf(_TOPIC_WORDS, 0.9)),
        identifiers=_identifiers(rng, identifiers),
    )


def content_words(text: str) -> list[str]:
    """Lower-case alphabetic words of a text (what the synthetic embedder and queries look at)."""
    return _WORD_RE.findall(text.lower())


# Text -------------------------------------------------------------------------------------------
def _words(rng: np.random.Generator, vocab: Vocabulary, n: int, topics: tuple[int, int], french: bool) -> list[str]:
    """n words: ~42% function words, ~30% topic words, the rest general Zipf words; some end a sentence."""
    kind = rng.random(n)
    function, cdf = (_FR_ARRAY, _FR_CDF) if french else (_EN_ARRAY, _EN_CDF)
    topic = np.where(rng.random(n) < 0.8, topics[0], topics[1])
    picks = vocab.topic_words[topic, _draw(rng, vocab.within_cdf, n)]
    content = vocab.words[np.where(kind < 0.72, picks, _draw(rng, vocab.word_cdf, n))]
    out = np.where(kind < 0.42, function[_draw(rng, cdf, n)], content)
    ends = np.flatnonzero(rng.random(n) < 1 / 13)
    out[ends] = out[ends] + "."
    return out.tolist()


class _Prose:
    """A session's words, drawn in blocks: per-message numpy calls dominated the generator's time."""

    def __init__(self, rng: np.random.Generator, vocab: Vocabulary, topics: tuple[int, int], french: bool) -> None:
        self.rng, self.vocab, self.topics, self.french = rng, vocab, topics, french
        self.words: list[str] = []
        self.pos = 0

    def text(self, n: int) -> str:
        """n words as a sentence-cased text ending with a full stop."""
        if self.pos + n > len(self.words):
            self.words = self.words[self.pos:] + _words(self.rng, self.vocab, max(n, 2048), self.topics, self.french)
            self.pos = 0
        chunk = self.words[self.pos:self.pos + n]
        self.pos += n
        text = " ".join(chunk).capitalize()
        return text if text.endswith(".") else text + "."


def _with_identifier(rng: np.random.Generator, vocab: Vocabulary, text: str) -> str:
    """Mentions one identifier (Zipf over the pool: a few orders/errors come back often)."""
    ident = vocab.identifiers[min(int(rng.zipf(1.3)) - 1, len(vocab.identifiers) - 1)]
    lead = ("about", "regarding", "for", "re", "see")[int(rng.integers(5))]
    return f"{text} ({lead} {ident})" if rng.random() < 0.5 else f"{ident}: {text}"


def _tool_output(rng: np.random.Generator, vocab: Vocabulary, prose: _Prose, when: datetime) -> str:
    """A long tool output: a JSON head with identifiers, then log lines with words and codes."""
    ids = vocab.identifiers[rng.integers(0, len(vocab.identifiers), 3)]
    head = json.dumps({"status": int(rng.choice([200, 200, 200, 404, 500, 504])), "id": ids[0],
                       "error": ids[1], "ref": ids[2], "elapsed_ms": int(rng.integers(3, 4000))})
    lines = [head]
    for i in range(max(2, int(rng.lognormal(np.log(12), 0.6)))):
        level = ("INFO", "INFO", "DEBUG", "WARN", "ERROR")[int(rng.integers(5))]
        stamp = (when + timedelta(milliseconds=37 * i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lines.append(f"{stamp} {level} {prose.text(int(rng.integers(6, 30)))}")
    return "\n".join(lines)


# Time -------------------------------------------------------------------------------------------
def _session_starts(rng: np.random.Generator, day: datetime, params: ThreadParams) -> list[datetime]:
    """Start times of the day's sessions (none on a day off), in order, between 07:00 and 23:00."""
    if rng.random() < 0.15:
        return []
    count = 1 + int(rng.poisson(max(params.sessions_per_day - 1, 0.0)))
    minutes = np.sort(rng.uniform(7 * 60, 23 * 60, count))
    return [day + timedelta(minutes=float(m)) for m in minutes]


def _gap(rng: np.random.Generator, role: str) -> timedelta:
    """Delay before a message: people think for a while, tools and models answer fast.

    Capped under the 30-minute idle timeout so a session is one conversation.
    """
    median = {"user": 50.0, "assistant": 9.0, "tool": 2.0}[role]
    return timedelta(seconds=min(float(rng.lognormal(np.log(median), 0.9)), 20 * 60))


# Messages ---------------------------------------------------------------------------------------
def _message(rng: np.random.Generator, vocab: Vocabulary, role: str, prose: _Prose, when: datetime,
             params: ThreadParams) -> dict[str, Any]:
    """The content (and tools) of one message of the given role."""
    if role == "tool":
        tool = _TOOLS[int(rng.integers(len(_TOOLS)))]
        return {"role": "tool", "content": _tool_output(rng, vocab, prose, when), "tools_used": [tool]}
    median, sigma = (14.0, 0.8) if role == "user" else (70.0, 0.8)
    n_words = int(np.clip(rng.lognormal(np.log(median), sigma), 2, 2500))
    text = prose.text(n_words)
    if rng.random() < params.identifier_rate:
        text = _with_identifier(rng, vocab, text)
    return {"role": role, "content": text}


def _session_roles(rng: np.random.Generator, params: ThreadParams) -> list[str]:
    turns = max(1, int(rng.lognormal(np.log(params.turns_per_session), 0.7)))
    roles: list[str] = []
    for _ in range(turns):
        roles.append("user")
        if rng.random() < params.tool_rate:
            roles.append("tool")
        roles.append("assistant")
    return roles


def _session(rng: np.random.Generator, vocab: Vocabulary, start: datetime, params: ThreadParams
             ) -> Iterator[dict[str, Any]]:
    """One session's messages (without ids), timestamps rising from `start`."""
    n_topics = len(vocab.topic_weights)
    main, drift = (int(t) for t in rng.choice(n_topics, 2, p=vocab.topic_weights))
    topics = (main, drift if rng.random() < 0.3 else main)
    prose = _Prose(rng, vocab, topics, bool(rng.random() < params.french_rate))
    when = start
    for role in _session_roles(rng, params):
        when += _gap(rng, role)
        message = _message(rng, vocab, role, prose, when, params)
        message["created_at"] = when
        yield message


def iter_messages(params: ThreadParams) -> Iterator[dict[str, Any]]:
    """The thread's messages, oldest first, as `ConversationEngine.ingest` dicts."""
    rng = np.random.default_rng([params.seed, 2])
    vocab = vocabulary(params.seed, params.topics)
    day = last = params.first_day()
    produced = 0
    while produced < params.n_messages:
        for start in _session_starts(rng, day, params):
            start = max(start, last + timedelta(minutes=31))  # an idle gap ends the previous session
            for message in _session(rng, vocab, start, params):
                last = message["created_at"]
                message["created_at"] = last.isoformat().replace("+00:00", "Z")
                message["message_id"] = f"{params.user_id}-{produced:08d}"
                yield message
                produced += 1
                if produced >= params.n_messages:
                    return
        day = max(day + timedelta(days=1), (last + timedelta(hours=6)).replace(hour=0, minute=0, second=0, microsecond=0))


def generate(n_messages: int, seed: int = 0, **options: Any) -> list[dict[str, Any]]:
    """`iter_messages` as a list (fine up to a few hundred thousand messages)."""
    return list(iter_messages(ThreadParams(n_messages=n_messages, seed=seed, **options)))


def make_queries(sample: list[dict[str, Any]], n: int, seed: int = 0, id_share: float = 0.25) -> list[str]:
    """Queries a user might type about messages of the thread: known-item words, or an identifier.

    Drawn from `sample` (messages of the thread), so every query has an answer in it.
    """
    rng = np.random.default_rng([seed, 3])
    idents = [m for m in sample if re.search(r"\b(ORD-\d+|E\d{4}|INC-\d+)\b", m["content"])]
    queries: list[str] = []
    while len(queries) < n:
        if idents and rng.random() < id_share:
            found = re.findall(r"\b(?:ORD-\d+|E\d{4}|INC-\d+)\b", idents[int(rng.integers(len(idents)))]["content"])
            queries.append(f"what happened with {found[0]}")
            continue
        words = [w for w in content_words(sample[int(rng.integers(len(sample)))]["content"]) if len(w) > 3]
        if len(words) >= 3:
            picked = rng.choice(len(words), min(len(words), int(rng.integers(3, 6))), replace=False)
            queries.append(" ".join(words[i] for i in sorted(picked)))
    return queries


# Vectors ----------------------------------------------------------------------------------------
class SyntheticEmbedder:
    """An `Embedder` with clustered vectors that follow the text: a stand-in for MiniLM at scale.

    Each topic has a random centre; a topic word's vector is its topic's centre plus noise, a
    general word is noise weighted by its rarity, any other word (function words, identifiers'
    letters) a faint hashed vector. A text is the normalised sum of its words, so windows of one
    topic cluster around its centre, overlap with a drifting topic, and a query lands near the
    windows whose words it shares: the structure an HNSW graph meets with real embeddings.
    """

    name = "synthetic-clustered"
    dim = 384
    max_tokens = 256

    def __init__(self, seed: int = 0, topics: int = 300, *, hashed_rows: int = 4096) -> None:
        vocab = vocabulary(seed, topics)
        rng = np.random.default_rng([seed, 4])
        n_words = len(vocab.words)
        centres = _unit(rng.standard_normal((topics, self.dim)))
        rarity = np.log(np.arange(n_words) + 2.0) / np.log(n_words + 2.0)  # idf-like: common words weigh less
        table = _unit(rng.standard_normal((n_words + hashed_rows, self.dim))) * 0.1
        table[:n_words] *= (3.0 * rarity)[:, None]
        for topic, members in enumerate(vocab.topic_words):
            table[members] += centres[topic]
        self.table = table.astype(np.float32)
        self.row = {word: i for i, word in enumerate(vocab.words.tolist())}
        self.n_words, self.hashed_rows = n_words, hashed_rows

    def _rows(self, text: str) -> list[int]:
        """Table rows of a text's words; crc32 (not the salted hash()) keeps unknown words stable."""
        get, base, buckets = self.row.get, self.n_words, self.hashed_rows
        words = content_words(text)
        rows = [get(w, -1) for w in words]
        if -1 in rows:
            rows = [r if r >= 0 else base + zlib.crc32(w.encode()) % buckets for r, w in zip(rows, words)]
        return rows or [base + zlib.crc32(text.encode()) % buckets]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), 384) float32 unit rows.

        One small gather-and-sum per text: np.add.reduceat over the whole batch was 15x slower.
        """
        if not len(texts):
            return np.zeros((0, self.dim), dtype=np.float32)
        sums = np.stack([self.table[self._rows(t)].sum(axis=0) for t in texts])
        return _unit(sums).astype(np.float32)


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for message in iter_messages(ThreadParams(n_messages=args.n, seed=args.seed)):
        sys.stdout.write(json.dumps(message) + "\n")


if __name__ == "__main__":
    main()
