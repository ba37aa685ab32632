"""Summarizers: a deterministic extractive one (no LLM) here, and an OpenAI-compatible chat client
(engine/summaries/chat_summarizer.py) that `make_summarizer` picks when configured.

Both fill the same Markdown template (SECTIONS) so stored summaries look alike whichever wrote
them. The extractive one only ever quotes the conversation itself, sentence by sentence: under
Summary, the opening request and statements that together cover the conversation's topics; under
the other sections, sentences chosen by English, French and Japanese cues. It never quotes tool
outputs or code blocks.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache, wraps
from itertools import repeat
from typing import Callable, Protocol, Sequence, TypeVar

from engine.config import Settings
from engine.errors import InvalidInputError, SummarizerError
from engine.models import Message
from engine.summaries.cues import cue_section

__all__ = [
    "SECTIONS",
    "NONE_NOTED",
    "Summarizer",
    "SummarizerError",
    "ExtractiveSummarizer",
    "make_summarizer",
    "split_sentences",
    "section_text",
    "clamp_title",
    "word_count",
    "speaker_label",
]

T = TypeVar("T")

SECTIONS = ("Summary", "Goals", "Decisions", "Open loops", "Next steps")
NONE_NOTED = "- none noted"
MAX_QUOTE_WORDS = 30
MAX_BULLETS = 5
TITLE_WORDS = (5, 8)
COVER_WORDS = 200  # word budget of the quotes that cover the conversation's topics (LoCoMo dev, LOO: docs/benchmarks.md)


class Summarizer(Protocol):
    def summarize(self, messages: Sequence[Message]) -> str:
        """Markdown with the five SECTIONS headings."""
        ...

    def title(self, messages: Sequence[Message]) -> str:
        """A 5-8 word title naming the main topic."""
        ...


# Text helpers ------------------------------------------------------------------------------------
_CODE_FENCE = re.compile(r"```.*?(```|$)", re.S)
# after . ! ? … with white space; after CJK full stops with or without it
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])\s*")
_LIST_PREFIX = re.compile(r"^\s*(?:[-*+>#・•]+|\d+[.)])\s*")
_WORD = re.compile(r"[\w'-]+", re.U)
_ASCII_NOT_ALNUM = "".join(chr(c) for c in range(128) if not chr(c).isalnum())
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_STOPWORDS = frozenset(
    "a an and are as at be but by can could do does for from had has have how i if in into is it its "
    "just let me my no not of on or our so that the their them then there these this to up was we "
    "what when where which who why will with would you your yes ok okay about also should shall "
    "since because while before after than very really "
    "le la les un une des du de et est en que qui pour pas sur dans avec ce cette ces je tu il elle "
    "nous vous ils on mais ou donc au aux se sa son ses mon ma mes ton ta tes plus très bien".split()
)


# Words that carry no topic in chat ("Wow, that's so cool, thanks!"): never a topic, never covered.
_CHAT_WORDS = frozenset(
    "really great thanks thank love cool awesome glad wow hey good nice sounds sound know think yeah totally "
    "feel feels felt lot lots time times much things thing something anything everything one get got getting "
    "like make makes made going gonna want way well sure see seen look looks looking amazing awesome hope "
    "happy super pretty always never ever even still been being did done doing say said tell told "
    "definitely absolutely especially actually maybe kind kinda stuff right now today day yesterday "
    "all any some more most other others own same such too here how's what's that's it's i'm you're "
    "don't can't didn't i've you've we're they're let's i'll you'll there's must glad cheers bye soon "
    "merci vraiment super génial trop c'est j'ai".split()
)


def _normalise(text: str) -> str:
    return text.replace("\u2019", "'").replace("\u00a0", " ")


def split_sentences(text: str) -> list[str]:
    """Sentences of `text` (CJK full stops too), code blocks removed, list markers stripped (lines never join)."""
    return list(_split_sentences(text))


def _memo(fn: Callable[[str], T]) -> Callable[[str], T]:
    """fn with its results memoised for texts up to 4,000 characters (at most 16k of them, ~64 MB
    at worst): a message is read by its day's summary, its conversation's summary and title and
    the day's progress updates, and each sentence's words are looked at several times."""
    cached = lru_cache(maxsize=1 << 14)(fn)

    @wraps(fn)
    def memoised(text: str) -> T:
        return cached(text) if len(text) <= 4000 else fn(text)
    return memoised


@_memo
def _split_sentences(text: str) -> tuple[str, ...]:
    sentences: list[str] = []
    for line in _CODE_FENCE.sub(" ", _normalise(text)).splitlines():
        line = _LIST_PREFIX.sub("", line).strip()
        sentences.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return tuple(sentences)


@_memo
def word_count(text: str) -> int:
    """Words, counting two CJK characters as one (CJK text has no spaces between words)."""
    if text.isascii():  # a word with a letter or digit is one that stripping the rest leaves
        return len([w for w in map(str.strip, text.split(), repeat(_ASCII_NOT_ALNUM)) if w])
    cjk = len(_CJK.findall(text))
    return sum(any(c.isalnum() for c in w) for w in _CJK.sub(" ", text).split()) + (cjk + 1) // 2


@_memo
def _content_words(text: str) -> tuple[str, ...]:
    """Lower-cased content words; a CJK run gives its character bigrams (it has no spaces to split at)."""
    if text.isascii():  # lower-casing ASCII keeps every word's bounds: one lower() for the text
        return tuple(t for t in map(str.strip, _WORD.findall(text.lower()), repeat("'-"))
                     if len(t) > 2 and t not in _STOPWORDS)
    words: list[str] = []
    cjk = _CJK.search(text) is not None  # else no token can hold CJK: one search instead of one a token
    for token in (t.lower().strip("'-") for t in _WORD.findall(text)):
        if cjk and _CJK.search(token):
            words += [token[i:i + 2] for i in range(max(len(token) - 1, 1))]
        elif len(token) > 2 and token not in _STOPWORDS:
            words.append(token)
    return tuple(words)


@_memo
def _spaced_words(text: str) -> tuple[str, ...]:
    """The content words of a text that are not CJK bigrams (title keywords)."""
    if text.isascii():  # no CJK to leave out
        return _content_words(text)
    return tuple(w for w in _content_words(text) if not _CJK.search(w))


def _quote(sentence: str) -> str:
    """A short quote: at most MAX_QUOTE_WORDS words (2 CJK characters a word), ending in punctuation."""
    words = sentence.split()
    if len(words) > MAX_QUOTE_WORDS:
        return " ".join(words[:MAX_QUOTE_WORDS]) + " …"
    if len(sentence) > 2 * MAX_QUOTE_WORDS and word_count(sentence) > MAX_QUOTE_WORDS:
        return sentence[: 2 * MAX_QUOTE_WORDS] + "…"
    return sentence if sentence[-1] in ".!?…。！？" else sentence + "."


def section_text(markdown: str, heading: str) -> str:
    """The body of `## heading` in a template summary ('' when absent)."""
    match = re.search(rf"^##\s*{re.escape(heading)}\s*$(.*?)(?=^##\s|\Z)", markdown, re.M | re.S | re.I)
    return match.group(1).strip() if match else ""


_TRAILING = frozenset("since because while when where which who that and or but so to of for with as if".split())


def clamp_title(text: str, fallback_words: Sequence[str] = ()) -> str:
    """A 5-8 word title: cut at 8 words (at a clause end when one falls within 5-8), padded from
    `fallback_words` up to 5."""
    if _CJK.search(text) and word_count(text) >= TITLE_WORDS[0]:  # no spaces: cut by characters, 2 a word
        return text.strip().rstrip("。！？、.!?")[: 2 * TITLE_WORDS[1] + 1]
    clause = re.split(r"[,;:(—–]| - ", _normalise(text))
    base = clause[0] if len(clause) > 1 and TITLE_WORDS[0] <= len(clause[0].split()) <= TITLE_WORDS[1] else text
    words = [w.strip(".,;:!?\"'`()[]*#。！？、") for w in _normalise(base).split()]
    words = [w for w in words if w][: TITLE_WORDS[1]]
    while len(words) > TITLE_WORDS[0] and (words[-1].lower() in _STOPWORDS or words[-1].lower() in _TRAILING):
        words.pop()  # "Set up DuckDB for the" reads as cut off
    for extra in [*fallback_words, "general", "conversation", "notes", "and", "follow-ups"]:
        if len(words) >= TITLE_WORDS[0]:
            break
        if extra.lower() not in {w.lower() for w in words}:
            words.append(extra)
    title = " ".join(words)
    return title[:1].upper() + title[1:]


# Extractive ----------------------------------------------------------------------------------
# Cues, English, French and Japanese (the languages the tokenizer handles): engine/summaries/cues.py.
_QUESTION = re.compile(r"[?？]\s*$")
_FILLER = re.compile(
    r"^(hi|hello|hey|morning|good morning|bonjour|salut|ok|okay|so|well|please|can you|could you|would you|"
    r"help me|i'd like to|i would like to|i want to|i need to|let's|we need to|je voudrais|je veux|peux-tu|"
    r"pouvez-vous|est-ce que tu peux|aide-moi à|remind me|to)\b[\s,!.:]*", re.I)


@dataclass(frozen=True, slots=True)
class _Sentence:
    text: str
    speaker: str
    index: int  # position of its message among the quotable ones
    role: str


def speaker_label(message: Message) -> str:
    return message.speaker or message.role.capitalize()


def _quotable(messages: Sequence[Message]) -> list[Message]:
    """Conversation turns a summary may quote: never engine notes, tool outputs or system prompts."""
    return [m for m in messages if m.kind == "turn" and m.role in ("user", "assistant") and m.content.strip()]


def _sentences(messages: Sequence[Message]) -> list[_Sentence]:
    out: list[_Sentence] = []
    for index, m in enumerate(messages):
        for text in _said(m.content):
            out.append(_Sentence(text, speaker_label(m), index, m.role))
    return out


@_memo
def _said(content: str) -> tuple[str, ...]:
    """The sentences of a message a summary may quote: three words or more, some letters."""
    return tuple(text for text in _split_sentences(content) if word_count(text) >= 3 and any(c.isalpha() for c in text))


def _answered(question: _Sentence, messages: Sequence[Message], words_of: Callable[[int], frozenset[str]]) -> bool:
    """A question counts as answered when a later message of the other side shares a content word."""
    words = set(_content_words(question.text))
    for index in range(question.index + 1, len(messages)):
        if messages[index].role != question.role and (not words or words & words_of(index)):
            return True
    return False


def _classify(sentence: _Sentence, messages: Sequence[Message], words_of: Callable[[int], frozenset[str]]) -> str | None:
    """The one section a sentence belongs to: a question is an open loop while unanswered and never
    a decision; then explicit uncertainty, decisions, next steps (first-person future, imperatives),
    goals."""
    text = sentence.text
    if _QUESTION.search(text):
        return None if _answered(sentence, messages, words_of) else "Open loops"
    return _cued(text)


_cued = _memo(cue_section)  # a pure function of the text: memoised


def _topic_words(text: str) -> list[str]:
    """Content words that can name a topic (no chat filler like "awesome"; CJK runs stay bigrams)."""
    return [w for w in _content_words(text) if w not in _CHAT_WORDS]


@_memo
def _distinct_topic_words(text: str) -> tuple[str, ...]:
    """The distinct topic words of a sentence, sorted: a score sums their weights in one order, so
    equal scores tie the same way in every process (a set's order follows the hash seed)."""
    return tuple(sorted(set(_topic_words(text))))


def _covering(sentences: list[_Sentence], budget: int) -> list[_Sentence]:
    """Statements that together cover the conversation's topic words, up to `budget` words, in order.

    SumBasic: a word weighs its share of the conversation's topic words, and once a chosen sentence
    holds it, its weight is squared, so the next sentence is drawn to what is not covered yet: one
    line per topic rather than three about the most talked-about one.

    Lazy greedy (same choices as re-scoring every sentence each round): weights only shrink, so a
    sentence's last score bounds its next; a heap pops the best bound, re-scores it with the same
    expression, and takes it when that score still leads (ties: the earlier sentence).
    """
    words = [_distinct_topic_words(s.text) for s in sentences]
    counts = Counter(w for ws in words for w in ws)
    total = sum(counts.values())
    weight = {w: c / total for w, c in counts.items()}

    def score(i: int) -> float:
        return sum(weight[w] for w in words[i]) / math.sqrt(len(words[i]))

    heap = [(-score(i), i) for i, s in enumerate(sentences)  # statements: not questions, not lead-ins ("the plan:")
            if words[i] and not _QUESTION.search(s.text) and not s.text.endswith((":", "："))]
    heapq.heapify(heap)
    left = budget
    chosen: list[int] = []
    while heap:
        bound, best = heapq.heappop(heap)
        size = min(word_count(sentences[best].text), MAX_QUOTE_WORDS)  # a quote is cut at MAX_QUOTE_WORDS
        if size > left:  # it never fits again (a big day stays fast)
            continue
        now = -score(best)
        if now != bound:  # a chosen sentence shared its words: re-queue at its lower score
            heapq.heappush(heap, (now, best))
            continue
        chosen.append(best)
        left -= size
        for w in words[best]:
            weight[w] **= 2
    return [sentences[i] for i in sorted(chosen)]


def _first_request(sentences: list[_Sentence]) -> _Sentence | None:
    """The user's first sentence that says something (not "Morning!" or "Back after lunch.")."""
    said = (s for s in sentences if _says_something(s.text))  # lazily: the first few decide
    first = next(said, None)
    if first is None:
        return sentences[0] if sentences else None
    return first if first.role == "user" else next((s for s in said if s.role == "user"), first)


@_memo
def _says_something(text: str) -> bool:
    return len(_content_words(_strip_filler(text))) >= 3


@_memo
def _strip_filler(text: str) -> str:
    previous = None
    while previous != text:  # strip "Hi, can you please help me ..." layer by layer
        previous, text = text, _FILLER.sub("", text.strip(), count=1)
    return text


class ExtractiveSummarizer:
    """Deterministic, LLM-free: quotes the conversation's own sentences under the template."""

    def __init__(self, cover_words: int = COVER_WORDS) -> None:
        self.cover_words = cover_words  # besides the opening request

    def summarize(self, messages: Sequence[Message]) -> str:
        turns = _quotable(messages)
        sentences = _sentences(turns)
        first = _first_request(sentences)
        rest = [s for s in sentences if s is not first]
        looked: dict[int, frozenset[str]] = {}  # this summary's only: not memoised (a set a message)

        def words_of(index: int) -> frozenset[str]:  # only questions look ahead, and stop at an answer
            if index not in looked:
                looked[index] = frozenset(_content_words(turns[index].content))
            return looked[index]

        sections: dict[str, list[str]] = {name: [] for name in SECTIONS}
        if first is not None:
            sections["Summary"].append(f"{first.speaker} asked: {_quote(first.text)}")
        for s in _covering(rest, self.cover_words):
            sections["Summary"].append(f"{s.speaker}: {_quote(s.text)}")
        seen: set[str] = set()
        for s in sentences:
            name = _classify(s, turns, words_of)
            if name is not None and s.text.lower() not in seen:
                seen.add(s.text.lower())
                sections[name].append(f"- **{s.speaker}**: {_quote(s.text)}")
        return _render(sections)

    def title(self, messages: Sequence[Message]) -> str:
        turns = _quotable(messages)
        first = _first_request(_sentences(turns))
        base = _strip_filler(first.text) if first is not None else ""
        keywords = Counter(w for m in turns for w in _spaced_words(m.content))
        ranked = [w for w, _ in sorted(keywords.items(), key=lambda kv: (-kv[1], kv[0]))]
        if not base and not ranked:
            return "Untitled conversation with no content yet"
        return clamp_title(base, ranked)


def _render(sections: dict[str, list[str]]) -> str:
    parts = []
    for name in SECTIONS:
        lines = sections[name] if name == "Summary" else sections[name][-MAX_BULLETS:]  # latest state wins
        parts.append(f"## {name}\n" + ("\n".join(lines) if lines else NONE_NOTED))
    return "\n\n".join(parts) + "\n"


def make_summarizer(settings: Settings) -> Summarizer | None:
    """The configured summarizer; None when summaries are off (summarizer='none')."""
    if settings.summarizer == "none":
        return None
    if settings.summarizer == "extractive":
        return ExtractiveSummarizer()
    if not settings.llm_url or not settings.llm_model:
        raise InvalidInputError(
            "summarizer 'openai' needs CONVSEARCH_LLM_URL and CONVSEARCH_LLM_MODEL "
            "(e.g. http://127.0.0.1:8080/v1 and the served model's name), or set CONVSEARCH_SUMMARIZER=extractive"
        )
    from engine.summaries.chat_summarizer import OpenAICompatibleSummarizer  # httpx only when configured

    return OpenAICompatibleSummarizer(settings.llm_url, settings.llm_model)
