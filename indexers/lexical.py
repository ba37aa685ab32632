"""The BM25 tokenizer: Unicode-aware words, searchable identifiers, CJK bigrams, stemming, stop words.

Pipeline for one text (documents and queries go through the same one, so they always agree):

1. NFKC, casefold, then strip Latin/Greek/Cyrillic-style combining diacritics (NFD, drop the
   marks, NFC) so `café` == `cafe`. Only the *diacritic* mark blocks are stripped: Indic vowel
   signs or the kana voicing mark are letters in all but name, and stay.
2. Chunks = a word (letters, digits, combining marks) optionally joined to further words by
   single connectors `- . / : @ _`. A chunk with connectors emits its parts *and* the joined
   form: `A-7731` -> `a`, `7731`, `a-7731`; `15.4` -> `15`, `4`, `15.4`. A query `A-7731`
   therefore matches exactly (the rare joined token weighs most) and `7731` alone still matches.
3. CJK runs (Han, kana, Hangul) become overlapping character bigrams (a lone char stays a
   unigram), since these scripts do not separate words with spaces.
4. Stop words (English + French, accent-stripped like the text) are dropped, then ASCII
   alphabetic tokens are Snowball-stemmed. Tokens with digits or connectors are never stemmed,
   so numbers and identifiers stay intact.

Speed: scanning is done by compiled regexes (a simpler one for ASCII texts); stop words and
stems are memoised per distinct raw token and computed for new ones in one PyStemmer batch.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from dataclasses import dataclass
from functools import cache
from itertools import chain, compress, count
from operator import not_
from typing import Any, Iterable, Sequence

import numpy as np

from engine.config import default
from engine.errors import InvalidInputError
from indexers.encoded_tokens import EncodedTokens

__all__ = ["TokenizerParams", "LexicalTokenizer", "ENGLISH_STOPWORDS", "FRENCH_STOPWORDS", "fold"]

ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    """a about above after again against all am an and any are aren as at be because been before
    being below between both but by can could couldn d did didn do does doesn doing don down during
    each few for from further had hadn has hasn have haven having he her here hers herself him
    himself his how i if in into is isn it its itself just ll m ma me mightn more most mustn my
    myself needn no nor not now o of off on once only or other our ours ourselves out over own re
    s same shan she should shouldn so some such t than that the their theirs them themselves then
    there these they this those through to too under until up ve very was wasn we were weren what
    when where which while who whom why will with won would wouldn y you your yours yourself
    yourselves""".split()
)

# Accents are written here as in French; they are stripped at import like any text.
# "son" is left out on purpose: it is an English content word.
_FRENCH_RAW = """au aux avec ce ces cet cette dans de des du elle elles en est et été être eux il ils
    je la le les leur leurs lui ma mais me même mes moi mon ne nos notre nous on ont ou où par pas
    pour qu que quel quelle quels quelles qui sa se ses si sont sur ta te tes toi ton tu un une vos
    votre vous c j l n s t y à ça étaient était étant avait avaient ai as avons avez été sera seront
    aussi comme donc ni car alors très tout tous toute toutes"""

_CONNECTORS = "-./:@_"
# Diacritic blocks only (Latin, Greek, Cyrillic...): stripping them folds `é` into `e`.
_DIACRITICS_RE = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_CJK_CLASS = (
    "\u1100-\u11ff\u3005\u3040-\u309f\u30a0-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"
)
_CJK_RUN_RE = re.compile(f"[{_CJK_CLASS}]+")
_BIGRAM_RE = re.compile(r"(?=(..))", re.DOTALL)
_SPLIT_RE = re.compile(f"[{re.escape(_CONNECTORS)}]+")
# ASCII texts are lowercased, so on them the general chunk pattern reduces to this (faster) one.
_ASCII_CHUNK_RE = re.compile(r"[a-z0-9][a-z0-9_]*(?:[-./:@_][a-z0-9_]+)*")
# A connector inside a chunk (with "_" in text): texts without one skip the expansion step.
_JOINED_RE = re.compile(r"[-./:@](?=\w)")
_CACHE_LIMIT = 200_000  # distinct raw tokens remembered per tokenizer
_ENCODE_BLOCK = 16_384  # texts `encode_many` holds the raw tokens of at once (4,096: 0.5 s slower a 65k-window half)


@dataclass(frozen=True, slots=True)
class TokenizerParams:
    stemming: bool = default("stemming")  # English Snowball stemming via PyStemmer (none if it is not installed)
    stopwords: bool = default("stopwords")  # drop English + French stop words
    cjk_bigrams: bool = True  # CJK runs -> overlapping bigrams; off: a CJK run is one token


def fold(text: str) -> str:
    """NFKC + casefold + diacritics stripped: the form every token is drawn from."""
    if text.isascii():
        return text.lower()  # NFKC is the identity on ASCII and casefold equals lower
    if "…" in text:  # NFKC makes "…" "...": the engine's summaries cut their quotes with it (94 % of them at 1M)
        dotted = text.replace("…", "...")
        if dotted.isascii():
            return dotted.lower()
    folded = unicodedata.normalize("NFKC", text).casefold()
    if folded.isascii():
        return folded
    # NFC afterwards recomposes what NFD split but must survive (Hangul syllables, kana + voicing).
    stripped = _DIACRITICS_RE.sub("", unicodedata.normalize("NFD", folded))
    return unicodedata.normalize("NFC", stripped)


FRENCH_STOPWORDS: frozenset[str] = frozenset(fold(w) for w in _FRENCH_RAW.split())
_STOPWORDS: frozenset[str] = ENGLISH_STOPWORDS | FRENCH_STOPWORDS


@cache
def _chunk_re() -> re.Pattern[str]:
    """Chunk regex, built once: Python's \\w omits combining marks, so they are added explicitly
    (otherwise Devanagari or Thai words would be cut at every vowel sign). BMP marks only: that
    covers the living scripts and keeps this one-off scan short."""
    marks: list[str] = []
    start = -1
    for cp in range(0x10001):
        is_mark = cp < 0x10000 and unicodedata.category(chr(cp)).startswith("M")
        if is_mark and start < 0:
            start = cp
        elif not is_mark and start >= 0:
            marks.append(f"{re.escape(chr(start))}-{re.escape(chr(cp - 1))}")
            start = -1
    word = f"[\\w{''.join(marks)}]"
    return re.compile(f"[^\\W_]{word}*(?:[{re.escape(_CONNECTORS)}]{word}+)*")


_local = threading.local()


def _stemmer() -> Any | None:
    """A per-thread English stemmer (PyStemmer objects are not thread-safe), None if missing."""
    stemmer = getattr(_local, "stemmer", False)
    if stemmer is False:
        try:
            import Stemmer
        except ImportError:
            stemmer = None
        else:
            stemmer = Stemmer.Stemmer("english")
        _local.stemmer = stemmer
    return stemmer


def _expand(chunk: str) -> list[str]:
    """A chunk's tokens: itself, or its parts plus the joined form when it has connectors."""
    parts = [p for p in _SPLIT_RE.split(chunk) if p]
    if len(parts) > 1:
        parts.append(chunk.strip("_"))
    return parts


def _expanded(chunks: list[str]) -> list[str]:
    """Each chunk with a connector `_expand`ed in place. Such chunks are few (an id, a date, a path in a
    text of hundreds of words), so they are found at C speed and the list is rebuilt around them: the
    same tokens as expanding chunk by chunk, which cost ~1 us a chunk (2.6 s for 57,613 summaries)."""
    joined = list(compress(count(), map(not_, map(str.isalnum, chunks))))
    if not joined:
        return chunks
    out: list[str] = []
    last = 0
    for at in joined:
        out.extend(chunks[last:at])
        out.extend(_expand(chunks[at]))
        last = at + 1
    out.extend(chunks[last:])
    return out


def _bigrams(run: str) -> list[str]:
    return _BIGRAM_RE.findall(run) if len(run) > 1 else [run]


class LexicalTokenizer:
    """Text -> BM25 tokens. Pure and deterministic; safe to share between threads.

    Stop-word filtering and stemming depend on the raw token alone, so their result is memoised
    per distinct token: after warm-up a document costs two regex scans and a dict lookup per token.
    """

    __slots__ = ("params", "_final")

    def __init__(self, params: TokenizerParams = TokenizerParams()) -> None:
        self.params = params
        self._final: dict[str, str] = {}  # raw token -> output token, "" for a stop word
        _chunk_re()  # pay the one-off regex build here, not on the first query

    def tokenize(self, text: str) -> list[str]:
        raw = self._raw_tokens(text)
        try:  # every raw token seen before (the usual case): one pass through the memo
            return list(filter(None, map(self._final.__getitem__, raw)))
        except KeyError:
            return list(filter(None, self._resolve(raw)))

    def tokenize_many(self, texts: Iterable[str]) -> list[list[str]]:
        """`tokenize` over many texts (kept for callers that batch)."""
        return [self.tokenize(t) for t in texts]

    def encode_many(self, texts: Sequence[str]) -> EncodedTokens:
        """`EncodedTokens.of(tokenize_many(texts))`, the same documents' tokens, without a list of
        strings per text: each distinct raw token is resolved and given its term's id once, then
        its occurrences map to that id in one pass (an index build's windows: half its tokenizing).
        A block of texts at a time: a 1M-message reindex held every raw token at once, +2.5 GB."""
        terms: dict[str, int] = {}
        code_of: dict[str, int] = {}  # raw token -> its term's id, -1 for a stop word
        ids: list[np.ndarray] = []
        lengths: list[np.ndarray] = []
        for first in range(0, len(texts), _ENCODE_BLOCK):
            raws = [self._raw_tokens(text) for text in texts[first:first + _ENCODE_BLOCK]]
            fresh = [token for token in dict.fromkeys(chain.from_iterable(raws)) if token not in code_of]
            code_of.update(zip(fresh, [terms.setdefault(final, len(terms)) if final else -1
                                       for final in self._resolve(fresh)]))
            ends = np.cumsum([0, *map(len, raws)])  # raw tokens before each text, then all of them
            codes = np.fromiter(map(code_of.__getitem__, chain.from_iterable(raws)), np.int32, int(ends[-1]))
            kept = np.concatenate(([0], np.cumsum(codes >= 0)))[ends]  # tokens kept before each text
            ids.append(codes[codes >= 0])
            lengths.append(np.diff(kept))
        return EncodedTokens(list(terms), np.concatenate(ids) if ids else np.zeros(0, np.int32),
                             np.concatenate(lengths) if lengths else np.zeros(0, np.int64))

    def _raw_tokens(self, text: str) -> list[str]:
        """Folded chunks, expanded into parts + joined form, CJK runs into bigrams."""
        if not isinstance(text, str):
            raise InvalidInputError(f"tokenize expects str, got {type(text).__name__}")
        folded = fold(text)
        if folded.isascii():
            tokens: list[str] = _ASCII_CHUNK_RE.findall(folded)
        elif self.params.cjk_bigrams and _CJK_RUN_RE.search(folded):
            # Isolate CJK runs so that neighbouring Latin words stay separate chunks.
            tokens = _chunk_re().findall(_CJK_RUN_RE.sub(r" \g<0> ", folded))
            tokens = list(chain.from_iterable(_bigrams(t) if _CJK_RUN_RE.match(t) else (t,) for t in tokens))
        else:
            tokens = _chunk_re().findall(folded)
        if "_" in folded or _JOINED_RE.search(folded):
            tokens = _expanded(tokens)
        return tokens

    def _resolve(self, raw: list[str]) -> list[str]:
        """Output tokens for `raw`, computing (and memoising) the ones not seen before."""
        distinct = set(raw)
        known = {t: self._final[t] for t in distinct if t in self._final}
        fresh = [t for t in distinct if t not in known]
        known.update(zip(fresh, self._finalize(fresh)))
        if len(self._final) > _CACHE_LIMIT:
            self._final.clear()  # bounded memory; entries are cheap to recompute
        self._final.update(known)
        return [known[t] for t in raw]

    def _finalize(self, words: list[str]) -> list[str]:
        """Stop words -> "", plain ASCII words -> stem; numbers, ids and other scripts unchanged."""
        stemmer = _stemmer() if self.params.stemming else None
        stems = stemmer.stemWords(words) if stemmer is not None else words
        stop = _STOPWORDS if self.params.stopwords else frozenset()
        return ["" if w in stop else s if w.isascii() and w.isalpha() else w for w, s in zip(words, stems)]
