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
import re
from collections import Counter
from itertools import chain
from typing import Callable, Iterable, Iterator, NamedTuple, Protocol, Sequence, TypeVar

from engine.config import Settings
from engine.errors import InvalidInputError, SummarizerError
from engine.models import Message, Spoken
from engine.text_rules import TITLE_CAP_CHARS, shortened
from engine.summaries.said import MAX_QUOTE_WORDS, Said, said_in
from engine.summaries.text import CJK, STOPWORDS, content_words, memo, normalise, spaced_words, split_sentences, word_count

__all__ = [
    "SECTIONS",
    "NONE_NOTED",
    "Summarizer",
    "PureSummarizer",
    "SummarizerError",
    "ExtractiveSummarizer",
    "make_summarizer",
    "split_sentences",
    "section_text",
    "clamp_title",
    "word_count",
    "speaker_label",
    "quotable",
]


SpokenT = TypeVar("SpokenT", bound=Spoken)
SECTIONS = ("Summary", "Goals", "Decisions", "Open loops", "Next steps")
NONE_NOTED = "- none noted"
MAX_BULLETS = 5
TITLE_WORDS = (5, 8)
# keywords clamp_title can read: it pads a title of k < TITLE_WORDS[0] words, skipping a keyword only when
# one of those k words is that keyword, until it has TITLE_WORDS[0]: at most k skips and 5 - k additions
TITLE_PADDING = TITLE_WORDS[0]
COVER_WORDS = 200  # word budget of the quotes that cover the conversation's topics (LoCoMo dev, LOO: docs/benchmarks.md)


class Summarizer(Protocol):
    def summarize(self, messages: Sequence[Message]) -> str:
        """Markdown with the five SECTIONS headings."""
        ...

    def title(self, messages: Sequence[Message]) -> str:
        """A 5-8 word title naming the main topic."""
        ...


class PureSummarizer(Protocol):
    """A summarizer that reads only a message's `Spoken` fields (marked `pure`): bulk paths may run
    it in worker processes."""

    pure: bool

    def summarize(self, messages: Sequence[Spoken]) -> str: ...

    def title(self, messages: Sequence[Spoken]) -> str: ...

    def read_ahead(self, texts: Sequence[str]) -> None:
        """Read what a summary reads of these quotable message texts (memoised), before one quotes them."""
        ...


# Text helpers: engine/summaries/text.py; a sentence's record: engine/summaries/said.py.
def _quote(sentence: str) -> str:
    """A short quote: at most MAX_QUOTE_WORDS words (2 CJK characters a word), ending in punctuation."""
    words = sentence.split()
    if len(words) > MAX_QUOTE_WORDS:
        return " ".join(words[:MAX_QUOTE_WORDS]) + " …"
    if len(sentence) > 2 * MAX_QUOTE_WORDS and word_count(sentence) > MAX_QUOTE_WORDS:
        return sentence[: 2 * MAX_QUOTE_WORDS] + "…"
    return sentence if sentence[-1] in ".!?…。！？" else sentence + "."


_NEXT_HEADING = re.compile(r"^##\s", re.M)


def section_text(markdown: str, heading: str) -> str:
    """The body of `## heading` in a template summary ('' when absent): up to the next `## `
    heading (found by one search, not tried at every character of the body)."""
    match = re.search(rf"^##\s*{re.escape(heading)}\s*$", markdown, re.M | re.I)
    if match is None:
        return ""
    following = _NEXT_HEADING.search(markdown, match.end())
    return markdown[match.end():following.start() if following else len(markdown)].strip()


_TRAILING = frozenset("since because while when where which who that and or but so to of for with as if".split())


def clamp_title(text: str, fallback_words: Sequence[str] = ()) -> str:
    """A 5-8 word title: cut at 8 words (at a clause end when one falls within 5-8), padded from
    `fallback_words` up to 5; at most TITLE_CAP_CHARS characters, since a "word" may be a megabyte."""
    if _cut_by_characters(text):
        return text.strip().rstrip("。！？、.!?")[: 2 * TITLE_WORDS[1] + 1]
    words = _title_words(text)
    for extra in [*fallback_words, "general", "conversation", "notes", "and", "follow-ups"]:
        if len(words) >= TITLE_WORDS[0]:
            break
        if extra.lower() not in {w.lower() for w in words}:
            words.append(extra)
    title = " ".join(words)
    return str(shortened(title[:1].upper() + title[1:], TITLE_CAP_CHARS))


def _pads(text: str) -> bool:
    """Whether `clamp_title` pads `text` with fallback words: only then are they worth finding."""
    return not _cut_by_characters(text) and len(_title_words(text)) < TITLE_WORDS[0]


def _cut_by_characters(text: str) -> bool:
    return CJK.search(text) is not None and word_count(text) >= TITLE_WORDS[0]  # no spaces: 2 characters a word


def _title_words(text: str) -> list[str]:
    """At most 8 of the text's words, from its first clause when that holds 5-8; a trailing stop word
    dropped while more than 5 remain ("Set up DuckDB for the" reads as cut off)."""
    clause = re.split(r"[,;:(—–]| - ", normalise(text))
    base = clause[0] if len(clause) > 1 and TITLE_WORDS[0] <= len(clause[0].split()) <= TITLE_WORDS[1] else text
    words = [w.strip(".,;:!?\"'`()[]*#。！？、") for w in normalise(base).split()]
    words = [w for w in words if w][: TITLE_WORDS[1]]
    while len(words) > TITLE_WORDS[0] and (words[-1].lower() in STOPWORDS or words[-1].lower() in _TRAILING):
        words.pop()
    return words


# Extractive ----------------------------------------------------------------------------------
# Cues, English, French and Japanese (the languages the tokenizer handles): engine/summaries/cues.py.
_FILLER = re.compile(
    r"^(hi|hello|hey|morning|good morning|bonjour|salut|ok|okay|so|well|please|can you|could you|would you|"
    r"help me|i'd like to|i would like to|i want to|i need to|let's|we need to|je voudrais|je veux|peux-tu|"
    r"pouvez-vous|est-ce que tu peux|aide-moi à|remind me|to)\b[\s,!.:]*", re.I)


class _Sentence(NamedTuple):
    """A quotable sentence where a summary found it. A NamedTuple: a summary makes one a sentence,
    ~0.25 us against ~1.4 for a frozen dataclass."""

    said: Said
    speaker: str
    turn: int  # position of its message among the quotable ones
    role: str

    @property
    def text(self) -> str:
        return self.said.text


def speaker_label(message: Spoken) -> str:
    return message.speaker or message.role.capitalize()


def quotable(messages: Sequence[SpokenT]) -> list[SpokenT]:
    """Conversation turns a summary may quote: never engine notes, tool outputs or system prompts."""
    return [m for m in messages if m.kind == "turn" and m.role in ("user", "assistant") and m.content.strip()]


def _sentences(messages: Sequence[Spoken]) -> list[_Sentence]:
    out: list[_Sentence] = []
    for index, m in enumerate(messages):
        speaker, role = speaker_label(m), m.role
        out += [_Sentence(said, speaker, index, role) for said in said_in(m.content)]
    return out


def _each_sentence(messages: Sequence[Spoken]) -> Iterator[_Sentence]:
    """`_sentences` one at a time (a title reads only the first few)."""
    for index, m in enumerate(messages):
        speaker, role = speaker_label(m), m.role
        for said in said_in(m.content):
            yield _Sentence(said, speaker, index, role)


def _by_count(item: tuple[str, int]) -> tuple[int, str]:
    """Keywords by count, then alphabetically."""
    return -item[1], item[0]


def _answered(question: _Sentence, messages: Sequence[Spoken], words_of: Callable[[int], frozenset[str]]) -> bool:
    """A question counts as answered when a later message of the other side shares a content word."""
    words = set(content_words(question.text))
    for index in range(question.turn + 1, len(messages)):
        if messages[index].role != question.role and (not words or words & words_of(index)):
            return True
    return False


def _classify(sentence: _Sentence, messages: Sequence[Spoken], words_of: Callable[[int], frozenset[str]]) -> str | None:
    """The one section a sentence belongs to: a question is an open loop while unanswered and never
    a decision; then explicit uncertainty, decisions, next steps (first-person future, imperatives),
    goals."""
    if sentence.said.question:
        return None if _answered(sentence, messages, words_of) else "Open loops"
    return sentence.said.cue


def _covering(sentences: list[_Sentence], budget: int) -> list[_Sentence]:
    """Statements that together cover the conversation's topic words, up to `budget` words, in order.

    SumBasic: a word weighs its share of the conversation's topic words, and once a chosen sentence
    holds it, its weight is squared, so the next sentence is drawn to what is not covered yet: one
    line per topic rather than three about the most talked-about one.

    Lazy greedy (same choices as re-scoring every sentence each round): weights only shrink, so a
    sentence's last score bounds its next; a heap pops the best bound, re-scores it with the same
    expression, and takes it when that score still leads (ties: the earlier sentence).
    """
    said = [s.said for s in sentences]
    words = [s.topics for s in said]
    counts = Counter(chain.from_iterable(words))
    total = sum(counts.values())
    weight = {w: c / total for w, c in counts.items()}

    def score(i: int) -> float:  # the same float sum, in the same order, as sum(weight[w] for w in words[i])
        return sum(map(weight.__getitem__, words[i])) / said[i].norm

    first: dict[str, int] = {}
    for i, s in enumerate(said):
        first.setdefault(s.text, i)
    heap = [(-score(i), i) for i, s in enumerate(said)  # statements: not questions, not lead-ins ("the plan:"),
            if s.topics and not s.question and not s.lead_in and first[s.text] == i]  # each text once
    heapq.heapify(heap)
    left = budget
    chosen: list[int] = []
    smallest = min((said[i].size for _, i in heap), default=0)
    while heap and left >= smallest:  # else nothing fits any more
        bound, best = heapq.heappop(heap)
        size = said[best].size
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


def _first_request(sentences: Iterable[_Sentence]) -> _Sentence | None:
    """The user's first sentence that says something (not "Morning!" or "Back after lunch.")."""
    each = iter(sentences)
    head = next(each, None)
    said = (s for s in chain(() if head is None else (head,), each) if _says_something(s.text))  # lazily: first few
    first = next(said, None)
    if first is None:
        return head
    return first if first.role == "user" else next((s for s in said if s.role == "user"), first)


@memo
def _says_something(text: str) -> bool:
    return len(content_words(_strip_filler(text))) >= 3


@memo
def _strip_filler(text: str) -> str:
    previous = None
    while previous != text:  # strip "Hi, can you please help me ..." layer by layer
        previous, text = text, _FILLER.sub("", text.strip(), count=1)
    return text


class ExtractiveSummarizer:
    """Deterministic, LLM-free: quotes the conversation's own sentences under the template."""

    pure = True  # a function of the messages alone: bulk paths may run it in worker processes

    def __init__(self, cover_words: int = COVER_WORDS) -> None:
        self.cover_words = cover_words  # besides the opening request

    def summarize(self, messages: Sequence[Spoken]) -> str:
        turns = quotable(messages)
        sentences = _sentences(turns)
        first = _first_request(sentences)
        rest = [s for s in sentences if first is None or s.text != first.text]  # the request is quoted once
        looked: dict[int, frozenset[str]] = {}  # this summary's only: not memoised (a set a message)

        def words_of(index: int) -> frozenset[str]:  # only questions look ahead, and stop at an answer
            if index not in looked:
                looked[index] = frozenset(content_words(turns[index].content))
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

    def read_ahead(self, texts: Sequence[str]) -> None:
        for text in texts:  # its sentences' records: ~60 % of what summarising a turn costs
            said_in(text)

    def title(self, messages: Sequence[Spoken]) -> str:
        turns = quotable(messages)
        first = _first_request(_each_sentence(turns))  # the first few messages decide
        base = _strip_filler(first.text) if first is not None else ""
        ranked = _keywords(turns) if _pads(base) else []  # most first requests make a title alone
        if not base and not ranked:  # nothing at all, or greetings alone ("Hi there!")
            return "Small talk with no topic yet" if turns else "Untitled conversation with no content yet"
        return clamp_title(base, ranked)


def _keywords(turns: Sequence[Spoken]) -> list[str]:
    """The turns' most said words, as many as clamp_title may read (TITLE_PADDING): the top of the
    ranking, as sorting all would give."""
    keywords = Counter(chain.from_iterable(spaced_words(m.content) for m in turns))
    return [w for w, _ in heapq.nsmallest(TITLE_PADDING, keywords.items(), key=_by_count)]


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
