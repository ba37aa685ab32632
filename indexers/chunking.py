"""Chunk one thread into overlapping windows of whole messages that fit the embedding model.

all-MiniLM-L6-v2 reads 256 word pieces including [CLS] and [SEP] and silently drops the rest, so
every chunk's text counts at most `window_tokens` (<= 254) pieces of the model's own tokenizer.

A window is a run of consecutive message lines ("Speaker: content", joined by "\\n") taken
greedily while the sum of their counts fits. WordPiece splits on whitespace, so line counts add
up; a window of plain-text lines (counted word by word) takes the sum of their counts, any other
is re-counted, and shrunk in the (pathological) case they do not add up.
The next window starts `overlap_messages` before the previous end, fewer if the overlap would
leave no room for a new message, and always at least one message later. A line that alone
exceeds the budget is split into pieces (`part` 0, 1, ...), each its own chunk pointing to its
message. Tool outputs are indexed whole the same way (only the context payload trims them), so a
word in the middle of a long log is as searchable as one at its ends.

Restartable: a window depends only on the messages from its start up to the one after its end,
and so does the next start. Hence for every start s of a full run, chunking only the messages
with seq >= s yields exactly the full run's chunks from s on. So on append the pipeline keeps
the last chunk's from_seq (the manifest's tail), re-chunks the messages with seq >= it and
replaces the stored chunks with from_seq >= it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from engine.config import default
from engine.errors import InvalidInputError
from engine.models import Spoken
from engine.store.embedding_cache import content_hash
from indexers.model_files import MODEL_MAX_TOKENS
from indexers.wordpieces import TokenCounter, WordPieceCounter

__all__ = [
    "MAX_WINDOW_TOKENS",
    "INDEX_CAP_CHARS",
    "ChunkParams",
    "Chunk",
    "Window",
    "Turn",
    "TokenCounter",
    "WordPieceCounter",
    "speaker_label",
    "label_for",
    "render_line",
    "chunk_thread",
    "lines_of",
]

MAX_WINDOW_TOKENS = MODEL_MAX_TOKENS - 2  # [CLS] and [SEP] take two of the model's 256
# Only a message's first INDEX_CAP_CHARS are chunked and embedded: at ~80 us of CPU a character
# (benchmarks/big_message.py: 20,000 chars = 45 windows = 1.6 s CPU) a longer message would hold
# the index for minutes. The whole text stays in the store, where grep (substring search) finds it.
INDEX_CAP_CHARS = 20_000
_MIN_PIECE_ROOM = 16  # below this, a speaker prefix would crowd out the content of split pieces


@dataclass(frozen=True, slots=True)
class ChunkParams:
    """How threads are cut: see Settings.window_tokens, overlap_messages."""

    window_tokens: int = default("window_tokens")
    overlap_messages: int = default("overlap_messages")

    def __post_init__(self) -> None:
        if not 1 <= self.window_tokens <= MAX_WINDOW_TOKENS:
            raise InvalidInputError(f"window_tokens must be 1..{MAX_WINDOW_TOKENS}, got {self.window_tokens}")
        if self.overlap_messages < 0:
            raise InvalidInputError(f"overlap_messages must be >= 0, got {self.overlap_messages}")


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive messages of one thread (or one piece of a split message), ready to embed."""

    chunk_id: str  # hash of (thread_id, from_seq, to_seq, part, content_hash)
    thread_id: str
    from_seq: int
    to_seq: int  # inclusive
    message_ids: tuple[str, ...]  # in seq order; a piece of a split message has exactly that one id
    message_seqs: tuple[int, ...]
    text: str
    content_hash: str  # sha256 hex of text: the embedding cache key
    n_tokens: int  # word pieces of text, without special tokens
    part: int = 0  # piece number of a message split across several chunks, else 0
    line_ends: tuple[int, ...] = ()  # where each message's line ends in text (one per message id)

    def message_lines(self) -> tuple[str, ...]:
        """Each message's own line of the window, so a search can cite one without a store lookup."""
        return lines_of(self.text, self.line_ends)

    def message_line(self, line: int) -> str:
        return line_of(self.text, self.line_ends, line)


class Window(Protocol):
    """What a search reads of a window: a `Chunk`, or a saved window read without the ids only a
    reindex needs (indexers/chunk_map.SavedWindow)."""

    @property
    def thread_id(self) -> str: ...
    @property
    def from_seq(self) -> int: ...
    @property
    def to_seq(self) -> int: ...
    @property
    def message_ids(self) -> tuple[str, ...]: ...
    @property
    def message_seqs(self) -> tuple[int, ...]: ...
    @property
    def text(self) -> str: ...
    def message_lines(self) -> tuple[str, ...]: ...
    def message_line(self, line: int) -> str: ...


class Turn(Spoken, Protocol):
    """What chunking reads of a message (its words, and where it is): an `engine.models.Message`,
    or the slimmer `TurnRow`."""

    @property
    def message_id(self) -> str: ...
    @property
    def thread_id(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def tools_used(self) -> Sequence[str]: ...


class TurnRow(NamedTuple):
    """A `Turn` as a plain tuple: what the index reads of a message from the store's Arrow table
    (no Message objects for a whole thread) and what a worker process is sent of it."""

    message_id: str
    thread_id: str
    seq: int
    role: str
    content: str
    speaker: str | None
    tools_used: tuple[str, ...]
    kind: str


def lines_of(text: str, line_ends: Sequence[int]) -> tuple[str, ...]:
    """A window's message lines, from its text and where each line ends (none: one line)."""
    ends = line_ends or (len(text),)
    starts = (0, *(end + 1 for end in ends[:-1]))  # lines are joined by one "\n"
    return tuple(text[a:b] for a, b in zip(starts, ends))


def line_of(text: str, line_ends: Sequence[int], line: int) -> str:
    """One of a window's message lines (`lines_of(...)[line]` without cutting the others)."""
    if not line_ends:
        if line != 0:
            raise IndexError(line)
        return text
    return text[line_ends[line - 1] + 1 if line > 0 else 0:line_ends[line]]


def speaker_label(message: Turn) -> str:
    """The message's speaker, else its role capitalised; tool messages name their tools."""
    return label_for(message.speaker, message.role, message.tools_used)


def label_for(speaker: str | None, role: str, tools_used: Sequence[str] | None) -> str:
    """`speaker_label` from the fields alone (bulk loads have columns, not Message objects)."""
    if speaker:
        return speaker
    if role == "tool" and tools_used:
        return f"Tool: {', '.join(tools_used)}"
    return role.capitalize()


def render_line(message: Turn) -> str:
    """The indexed line of a message: "Speaker: content"."""
    return f"{speaker_label(message)}: {message.content}"


@dataclass(frozen=True, slots=True)
class _Line:
    message_id: str
    seq: int
    prefix: str  # "Speaker: "
    body: str  # content, tool outputs capped
    n_tokens: int  # exact up to the window budget; above it, only a number above it (the line is split)
    additive: bool = False  # counted as the sum of its words': a window of such lines sums their counts

    @property
    def text(self) -> str:
        return self.prefix + self.body


def _count_all(counter: TokenCounter, texts: list[str]) -> list[int]:
    count_many = getattr(counter, "count_many", None)
    return list(count_many(texts)) if count_many is not None else [counter.count(t) for t in texts]


def _count_lines(counter: TokenCounter, texts: list[str], budget: int) -> list[int]:
    """Each line's count, exact up to `budget` (over it, the line is split and its pieces counted)."""
    count_upto = getattr(counter, "count_many_upto", None)
    return list(count_upto(texts, budget)) if count_upto is not None else _count_all(counter, texts)


def _prepare_lines(messages: Sequence[Turn], counter: TokenCounter, budget: int) -> list[_Line]:
    """Validate one thread in seq order, drop notes, count lines in one batch (exact up to `budget`)."""
    for before, after in zip(messages, messages[1:]):
        if after.thread_id != before.thread_id:
            raise InvalidInputError(f"chunk one thread at a time: got {before.thread_id!r} and {after.thread_id!r}")
        if after.seq <= before.seq:
            raise InvalidInputError(f"messages must be in increasing seq order: {after.seq} after {before.seq}")
    turns = [m for m in messages if m.kind != "note"]
    bodies = [m.content[:INDEX_CAP_CHARS] for m in turns]  # tool outputs whole: pieces point to their message
    prefixes = [f"{speaker_label(m)}: " for m in turns]
    texts = [p + b for p, b in zip(prefixes, bodies)]
    additive = getattr(counter, "additive", lambda text: False)
    return [_Line(m.message_id, m.seq, p, b, n, additive(text))
            for m, p, b, n, text in zip(turns, prefixes, bodies, _count_lines(counter, texts, budget), texts)]


def _make_chunk(thread_id: str, lines: Sequence[_Line], text: str, n_tokens: int, part: int = 0) -> Chunk:
    text_hash = content_hash(text)
    from_seq, to_seq = lines[0].seq, lines[-1].seq
    key = "\x1f".join((thread_id, str(from_seq), str(to_seq), str(part), text_hash))
    return Chunk(
        chunk_id=hashlib.sha256(key.encode("utf-8")).hexdigest()[:32],
        thread_id=thread_id,
        from_seq=from_seq,
        to_seq=to_seq,
        message_ids=tuple(line.message_id for line in lines),
        message_seqs=tuple(line.seq for line in lines),
        text=text,
        content_hash=text_hash,
        n_tokens=n_tokens,
        part=part,
        line_ends=_line_ends(lines, text),
    )


def _line_ends(lines: Sequence[_Line], text: str) -> tuple[int, ...]:
    if len(lines) == 1:
        return (len(text),)
    ends, position = [], 0
    for line in lines:
        position += len(line.text)
        ends.append(position)
        position += 1
    return tuple(ends)


def _split_counted(counter: TokenCounter, text: str, max_tokens: int) -> list[tuple[str, int]]:
    split_counted = getattr(counter, "split_counted", None)
    if split_counted is not None:
        return list(split_counted(text, max_tokens))
    pieces = counter.split(text, max_tokens)
    return list(zip(pieces, _count_all(counter, pieces)))


def _piece_texts(line: _Line, budget: int, counter: TokenCounter) -> list[tuple[str, int]]:
    """Split an oversize line into (text, count); pieces keep the speaker prefix to read alone."""
    prefix_count = counter.count(line.prefix)
    room = budget - prefix_count
    for size in (room, room // 2):  # the second try only if prefix + piece does not add up
        if size < _MIN_PIECE_ROOM:
            break
        pieces = _split_counted(counter, line.body, size)
        if line.additive and line.prefix[-1:].isspace():  # "Speaker: ": its words and the piece's add up
            counted = [(line.prefix + piece, prefix_count + n) for piece, n in pieces]
        else:
            texts = [line.prefix + piece for piece, _ in pieces]
            counted = list(zip(texts, _count_all(counter, texts)))
        if max(n for _, n in counted) <= budget:
            return counted
    return _split_counted(counter, line.text, budget)  # a speaker name too long to repeat: split the bare line


def _piece_chunks(thread_id: str, line: _Line, budget: int, counter: TokenCounter) -> list[Chunk]:
    pieces = _piece_texts(line, budget, counter)
    return [_make_chunk(thread_id, [line], text, n, part) for part, (text, n) in enumerate(pieces)]


def _join(lines: Sequence[_Line]) -> str:
    return "\n".join(line.text for line in lines)


def _plan(lines: list[_Line], params: ChunkParams, fits: Callable[[int, int], bool]) -> list[tuple[int, int]]:
    """Spans lines[start:end] of the chunks; an oversize line is a span of its own, split later.

    Windows take lines greedily on summed counts, then shrink until `fits` accepts them.
    """
    budget = params.window_tokens
    spans: list[tuple[int, int]] = []
    start = 0
    while start < len(lines):
        if lines[start].n_tokens > budget:
            spans.append((start, start + 1))
            start += 1
            continue
        end, total = start, 0
        while end < len(lines) and total + lines[end].n_tokens <= budget:
            total += lines[end].n_tokens
            end += 1
        while end > start + 1 and not fits(start, end):
            end -= 1
        spans.append((start, end))
        if end == len(lines):
            break
        start = _next_start(lines, start, end, params)
    return spans


def _next_start(lines: list[_Line], start: int, end: int, params: ChunkParams) -> int:
    """Start of the window after lines[start:end]: up to `overlap_messages` back, never `start`.

    It looks only at lines[start : end + 1], which is what makes chunking restartable. A smaller
    overlap is taken when the full one would leave no room for lines[end] (that window would
    repeat old lines only); an oversize lines[end] is split alone, so nothing overlaps it.
    """
    budget = params.window_tokens
    if lines[end].n_tokens > budget:
        return end
    for back in range(min(params.overlap_messages, end - start - 1), 0, -1):
        if sum(line.n_tokens for line in lines[end - back : end + 1]) <= budget:
            return end - back
    return end


def _counted_plan(
    lines: list[_Line], params: ChunkParams, counter: TokenCounter, fits: Callable[[int, int], bool]
) -> tuple[list[tuple[int, int]], dict[tuple[int, int], int]]:
    """The plan's spans, and the true count of each window's text (one batch)."""
    spans = _plan(lines, params, fits)
    windows = [(a, b) for a, b in spans if lines[a].n_tokens <= params.window_tokens]
    counts = {(a, b): sum(line.n_tokens for line in lines[a:b]) for a, b in windows
              if all(line.additive for line in lines[a:b])}  # joined by "\n": the lines' counts add up
    rest = [span for span in windows if span not in counts]
    counts.update(zip(rest, _count_all(counter, [_join(lines[a:b]) for a, b in rest])))
    return spans, {span: counts[span] for span in windows}


def chunk_thread(messages: Sequence[Turn], params: ChunkParams, counter: TokenCounter) -> list[Chunk]:
    """Chunks of one thread's messages (seq order), ordered by (from_seq, part); notes skipped.

    Deterministic: the same messages and params always give the same chunks and ids.
    """
    lines = _prepare_lines(messages, counter, params.window_tokens)
    if not lines:
        return []
    budget = params.window_tokens
    spans, counts = _counted_plan(lines, params, counter, lambda start, end: True)
    if any(n > budget for n in counts.values()):
        # Line counts did not add up somewhere (never seen in practice): re-plan, counting each
        # window as it is built. Both plans agree whenever every window fits.
        def fits(start: int, end: int) -> bool:
            return counter.count(_join(lines[start:end])) <= budget

        spans, counts = _counted_plan(lines, params, counter, fits)
    thread_id = messages[0].thread_id
    chunks: list[Chunk] = []
    for a, b in spans:
        if (a, b) in counts:
            chunks.append(_make_chunk(thread_id, lines[a:b], _join(lines[a:b]), counts[a, b]))
        else:  # an oversize line alone
            chunks.extend(_piece_chunks(thread_id, lines[a], budget, counter))
    return chunks

