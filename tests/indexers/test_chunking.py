"""Chunking on generated threads with the real MiniLM WordPiece tokenizer (no mocks)."""

from __future__ import annotations

import bisect
import itertools
from datetime import date, datetime, timezone
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import InvalidInputError
from engine.models import Message
from indexers.wordpieces import SMALL_BATCH
from indexers.chunking import (
    INDEX_CAP_CHARS,
    MAX_WINDOW_TOKENS,
    Chunk,
    ChunkParams,
    WordPieceCounter,
    chunk_thread,
    line_of,
    render_line,
    speaker_label,
)

THREAD = "alice:continuous"
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
WORDS = ["the", "meeting", "moved", "to", "Tuesday", "café", "naïve", "東京", "한국어", "🙂", "don't", "x" * 120,
         "unaffable", "3.14159", "\t", "\n", "résumé", "JSON:{\"k\":[1,2]}", "—", "well,", "ok!"]
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@lru_cache(maxsize=1)
def counter() -> WordPieceCounter:
    return WordPieceCounter()


def msg(seq: int, content: str, role: str = "user", *, kind: str = "turn", speaker: str | None = None,
        tools: tuple[str, ...] = ()) -> Message:
    return Message(message_id=f"m{seq}", thread_id=THREAD, user_id="alice", seq=seq, role=role,  # type: ignore[arg-type]
                   content=content, created_at=T0, day_label=date(2024, 5, 1), conversation_id="c1",
                   speaker=speaker, tools_used=tools, kind=kind)  # type: ignore[arg-type]


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i} apple" for i in range(n))


# --- strategies -------------------------------------------------------------------------------

def long_text(n: int, seed: int) -> str:
    """n words cycling through WORDS: long contents drawn cheaply (a list draw per word is slow)."""
    return " ".join(WORDS[(seed + 7 * i) % len(WORDS)] for i in range(n))


medium = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)  # several lines per window
contents = st.one_of(
    st.just(""),
    st.text(max_size=40),
    medium,
    medium,
    medium,
    st.builds(long_text, st.integers(150, 400), st.integers(0, 100)),  # often over budget
)


@st.composite
def threads(draw: st.DrawFn) -> list[Message]:
    n = draw(st.integers(1, 20))
    gaps = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    out, seq = [], 0
    for gap in gaps:
        seq += gap
        role = draw(st.sampled_from(["user", "assistant", "assistant", "system", "tool"]))
        tools = draw(st.sampled_from([(), ("web_search",), ("sql", "shell")])) if role == "tool" else ()
        content = draw(contents) if role != "tool" else draw(st.one_of(contents, st.integers(100, 900).map(words)))
        out.append(msg(seq, content, role, kind=draw(st.sampled_from(["turn"] * 5 + ["note"])),
                       speaker=draw(st.sampled_from([None, None, "Caroline", "Ünïcødé Bot"])), tools=tools))
    return out


params_st = st.builds(ChunkParams, st.sampled_from([32, 48, 64, 96, 160, MAX_WINDOW_TOKENS]), st.integers(0, 3))


def expected_line(m: Message) -> str:
    """The line a message should contribute: every message whole, tool outputs included."""
    return f"{speaker_label(m)}: {m.content}"


# --- properties -------------------------------------------------------------------------------

@pytest.mark.slow
@PROPERTY
@given(threads(), params_st)
def test_every_turn_is_indexed_and_no_note_is(messages: list[Message], params: ChunkParams) -> None:
    chunks = chunk_thread(messages, params, counter())
    indexed = {mid for c in chunks for mid in c.message_ids}
    assert indexed == {m.message_id for m in messages if m.kind == "turn"}


@pytest.mark.slow
@PROPERTY
@given(threads(), params_st)
def test_chunks_are_ordered_fit_the_budget_and_count_truly(messages: list[Message], params: ChunkParams) -> None:
    chunks = chunk_thread(messages, params, counter())
    keys = [(c.from_seq, c.part) for c in chunks]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    for c in chunks:
        assert c.n_tokens == counter().count(c.text) <= params.window_tokens <= MAX_WINDOW_TOKENS
        assert c.thread_id == THREAD


@pytest.mark.slow
@PROPERTY
@given(threads(), params_st)
def test_provenance_is_exact(messages: list[Message], params: ChunkParams) -> None:
    turns = [m for m in messages if m.kind == "turn"]
    by_id = {m.message_id: m for m in turns}
    lines = {m.message_id: expected_line(m) for m in turns}
    pieces: dict[str, list[Chunk]] = {}
    for c in chunk_thread(messages, params, counter()):
        members = [by_id[mid] for mid in c.message_ids]
        assert c.message_seqs == tuple(m.seq for m in members)
        assert (c.from_seq, c.to_seq) == (members[0].seq, members[-1].seq)
        first = turns.index(members[0])
        assert turns[first : first + len(members)] == members  # contiguous, in seq order
        if len(members) == 1 and counter().count(lines[c.message_ids[0]]) > params.window_tokens:
            pieces.setdefault(c.message_ids[0], []).append(c)
        else:
            assert c.part == 0
            assert c.text == "\n".join(lines[m.message_id] for m in members)
    for mid, parts in pieces.items():  # a split message: its pieces rebuild exactly its line
        prefix = f"{speaker_label(by_id[mid])}: "
        assert [p.part for p in parts] == list(range(len(parts))) and len(parts) > 1
        bodies = [p.text.removeprefix(prefix) for p in parts]
        assert prefix + "".join(bodies) == lines[mid] or "".join(p.text for p in parts) == lines[mid]


@pytest.mark.slow
@PROPERTY
@given(threads(), params_st)
def test_each_window_adds_a_new_message_and_overlap_is_bounded(messages: list[Message], params: ChunkParams) -> None:
    chunks = [c for c in chunk_thread(messages, params, counter()) if c.part == 0]
    for before, after in zip(chunks, chunks[1:]):
        assert after.to_seq > before.to_seq  # no window repeats old messages only
        shared = set(before.message_ids) & set(after.message_ids)
        assert len(shared) <= params.overlap_messages
        assert after.from_seq > before.from_seq


@pytest.mark.slow
@PROPERTY
@given(threads(), params_st)
def test_chunking_is_deterministic(messages: list[Message], params: ChunkParams) -> None:
    first = chunk_thread(messages, params, counter())
    second = chunk_thread(list(messages), params, WordPieceCounter())
    assert first == second
    assert len({c.chunk_id for c in first}) == len(first)


@pytest.mark.slow
@PROPERTY
@given(threads(), params_st, st.data())
def test_restarting_at_a_window_start_reproduces_the_tail(messages: list[Message], params: ChunkParams,
                                                          data: st.DataObject) -> None:
    full = chunk_thread(messages, params, counter())
    starts = sorted({c.from_seq for c in full})
    if not starts:  # only notes
        return
    # The last start (the one the pipeline keeps) and a few others: every start costs a re-chunk.
    picked = {starts[-1], *data.draw(st.lists(st.sampled_from(starts), max_size=3))}
    for start in sorted(picked):
        tail = chunk_thread([m for m in messages if m.seq >= start], params, counter())
        assert tail == [c for c in full if c.from_seq >= start]


@PROPERTY
@given(st.text(max_size=300)
       | st.lists(st.sampled_from(WORDS), max_size=200).map(" ".join)
       | st.lists(st.sampled_from(WORDS), max_size=30).map("".join),  # long words: cuts inside them
       st.integers(1, 60))
def test_split_covers_the_text_in_pieces_that_fit(text: str, max_tokens: int) -> None:
    pieces = counter().split(text, max_tokens)
    assert "".join(pieces) == text
    assert all(p for p in pieces) or pieces == [""]
    for p in pieces:  # only a lone character may count more (a Hangul syllable is 3 pieces)
        assert counter().count(p) <= max_tokens or len(p) == 1


PLAIN = "\t\n\r" + "".join(map(chr, range(32, 127)))  # counted word by word
ASCII = "".join(map(chr, range(128)))  # control characters: counted whole


@PROPERTY
@given(st.lists(st.text(alphabet=PLAIN, max_size=40) | st.text(alphabet=ASCII, max_size=10)
                | st.sampled_from(WORDS), max_size=40).map(" ".join))
def test_word_by_word_counts_and_cuts_equal_the_tokenizer_on_any_text(text: str) -> None:
    """Plain text is counted and cut word by word through a memo: it must agree with the tokenizer
    run on the whole text (a counter given a tokenizer does that), control characters, words over
    100 characters and punctuation runs included."""
    from indexers.model_files import wordpiece_tokenizer

    whole = WordPieceCounter(wordpiece_tokenizer())
    texts = [text, text.upper(), "x" * 101 + text]
    assert counter().count_many(texts) == whole.count_many(texts)
    assert counter().count(text) == whole.count(text)
    assert counter().split(text, 7) == whole.split(text, 7)
    glued = text.replace(" ", "")  # long words: cuts inside them
    assert counter().split(glued, 2) == whole.split(glued, 2)
    for piece_text, budget in ((text, 7), (glued, 2), (text, 60)):  # counts read off the cuts are true
        pieces = counter().split_counted(piece_text, budget)
        assert pieces == [(p, whole.count(p)) for p in whole.split(piece_text, budget)]
    for limit in (3, 7, 60):  # exact up to the limit, above it only a number above it
        exact = whole.count_many(texts)
        bounded = counter().count_many_upto(texts, limit)
        assert all(b == n if n <= limit else b > limit for b, n in zip(bounded, exact))


class ExactLines(WordPieceCounter):
    """Counts every line exactly, the oversize ones too (what the chunker did before it took
    a bound for those)."""

    def count_many_upto(self, texts, limit):
        return self.count_many(texts)


@PROPERTY
@given(threads(), params_st)
def test_an_oversize_line_counted_by_its_words_gives_the_same_chunks(messages: list[Message],
                                                                     params: ChunkParams) -> None:
    assert chunk_thread(messages, params, counter()) == chunk_thread(messages, params, ExactLines())


# --- examples ---------------------------------------------------------------------------------

def test_a_few_texts_are_counted_one_by_one_as_a_batch_counts_them() -> None:
    """Fewer than SMALL_BATCH texts skip the tokenizer's thread pool (encoded one by one): the
    counts must be the batch's, on any text."""
    from indexers.model_files import wordpiece_tokenizer

    whole = WordPieceCounter(wordpiece_tokenizer())  # no word memo: every text goes to the tokenizer
    texts = [f"{w} naïve déjà-vu 東京 ECONNRESET{i} {w.upper()}!!" for i, w in enumerate(WORDS * 4)]
    assert len(texts) >= SMALL_BATCH
    assert whole.count_many(texts) == [whole.count_many([text])[0] for text in texts]

def test_a_long_tool_output_is_indexed_whole_in_pieces_that_point_to_it() -> None:
    output = "BEGIN " + words(400) + " ECONNRESET " + words(400, "v") + " END"
    chunks = chunk_thread([msg(1, "run the import"), msg(2, output, "tool", tools=("shell",)), msg(3, "it failed")],
                          ChunkParams(window_tokens=96), counter())
    pieces = [c for c in chunks if c.message_ids == ("m2",)]
    assert len(pieces) > 10 and [c.part for c in pieces] == list(range(len(pieces)))
    assert all(c.text.startswith("Tool: shell: ") and c.n_tokens <= 96 for c in pieces)
    assert "".join(c.text.removeprefix("Tool: shell: ") for c in pieces) == output  # the middle too
    assert sum("ECONNRESET" in c.text for c in pieces) == 1
    assert not any("omitted" in c.text for c in chunks)


@pytest.mark.slow
def test_a_one_megabyte_message_is_split_into_pieces_that_all_point_to_it() -> None:
    """Only its first INDEX_CAP_CHARS are indexed (the store keeps the rest, grep finds it)."""
    content = words(80_000)[:1_000_000]
    chunks = chunk_thread([msg(1, "before"), msg(2, content, "assistant"), msg(3, "after")],
                          ChunkParams(window_tokens=160), counter())
    pieces = [c for c in chunks if c.message_ids == ("m2",)]
    assert [c.part for c in pieces] == list(range(len(pieces))) and 20 < len(pieces) < 100
    assert all(c.from_seq == c.to_seq == 2 and c.message_seqs == (2,) for c in pieces)
    assert all(c.n_tokens <= 160 for c in pieces)
    assert "".join(c.text.removeprefix("Assistant: ") for c in pieces) == content[:INDEX_CAP_CHARS]
    assert [c.message_ids for c in chunks if c.message_ids != ("m2",)] == [("m1",), ("m3",)]  # never merged


def test_windows_overlap_by_one_message() -> None:
    messages = [msg(seq, f"message {seq} " + words(8, tag=f"s{seq}_")) for seq in range(1, 21)]
    chunks = chunk_thread(messages, ChunkParams(window_tokens=160, overlap_messages=1), counter())
    assert len(chunks) > 2
    for before, after in zip(chunks, chunks[1:]):
        assert after.from_seq == before.to_seq and len(before.message_ids) > 1


def test_overlap_shrinks_rather_than_repeat_a_window() -> None:
    sizes = [counter().count(render_line(msg(1, words(n)))) for n in (20, 30, 45)]
    assert sizes[0] + sizes[1] <= 160 < sizes[1] + sizes[2]  # 2 cannot share a window with 3
    messages = [msg(seq, words(n)) for seq, n in ((1, 20), (2, 30), (3, 45))]
    chunks = chunk_thread(messages, ChunkParams(window_tokens=160, overlap_messages=1), counter())
    assert [c.message_seqs for c in chunks] == [(1, 2), (3,)]


def test_split_cuts_between_words() -> None:
    assert counter().count("unaffable") == 3
    pieces = counter().split(" ".join(["unaffable"] * 100), 10)
    assert all(p.endswith(" ") and counter().count(p) == 9 for p in pieces[:-1])


def test_zero_overlap_windows_tile_the_thread() -> None:
    messages = [msg(seq, words(10, tag=f"s{seq}_")) for seq in range(1, 21)]
    chunks = chunk_thread(messages, ChunkParams(overlap_messages=0), counter())
    assert [s for c in chunks for s in c.message_seqs] == list(range(1, 21))


def test_a_window_ending_before_an_oversize_message_does_not_repeat() -> None:
    messages = [msg(1, words(20)), msg(2, words(20)), msg(3, words(200)), msg(4, "tail")]
    chunks = chunk_thread(messages, ChunkParams(window_tokens=160), counter())
    assert chunks[0].message_seqs == (1, 2)
    assert {c.message_seqs for c in chunks[1:-1]} == {(3,)} and chunks[-1].message_seqs == (4,)


class CharCounter:
    """A TokenCounter where the joining "\n" costs one: line counts do not add up."""

    def count(self, text: str) -> int:
        return len(text)

    def split(self, text: str, max_tokens: int) -> list[str]:
        return [text[i : i + max_tokens] for i in range(0, len(text), max_tokens)] or [""]


def test_budget_holds_even_when_line_counts_do_not_add_up() -> None:
    messages = [msg(seq, "abcdefghij") for seq in range(1, 9)]  # lines "User: abcdefghij" of 16
    chunks = chunk_thread(messages, ChunkParams(window_tokens=32), CharCounter())
    assert all(c.n_tokens == len(c.text) <= 32 for c in chunks)  # 16 + 16 fit, 16 + 1 + 16 does not
    assert [c.message_seqs for c in chunks] == [(seq,) for seq in range(1, 9)]


def test_notes_only_and_empty_threads_give_no_chunks() -> None:
    assert chunk_thread([], ChunkParams(window_tokens=160), counter()) == []
    assert chunk_thread([msg(1, "day summary updated", "system", kind="note")], ChunkParams(window_tokens=160), counter()) == []


def test_render_line_names_the_speaker() -> None:
    assert render_line(msg(1, "hi")) == "User: hi"
    assert render_line(msg(1, "hi", speaker="Caroline")) == "Caroline: hi"
    assert render_line(msg(1, "{}", "tool", tools=("web_search",))) == "Tool: web_search: {}"
    assert render_line(msg(1, "", "tool")) == "Tool: "


def test_ids_change_with_content_and_position() -> None:
    base = chunk_thread([msg(1, "a"), msg(2, "b")], ChunkParams(window_tokens=160), counter())[0]
    edited = chunk_thread([msg(1, "a"), msg(2, "c")], ChunkParams(window_tokens=160), counter())[0]
    shifted = chunk_thread([msg(2, "a"), msg(3, "b")], ChunkParams(window_tokens=160), counter())[0]
    assert len({base.chunk_id, edited.chunk_id, shifted.chunk_id}) == 3
    assert base.content_hash == shifted.content_hash != edited.content_hash


@pytest.mark.parametrize("messages", [
    [msg(2, "a"), msg(1, "b")],
    [msg(1, "a"), msg(1, "b")],
    [msg(1, "a"), Message("x", "other:thread", "alice", 2, "user", "b", T0, date(2024, 5, 1), "c1")],
])
def test_bad_input_is_refused(messages: list[Message]) -> None:
    with pytest.raises(InvalidInputError):
        chunk_thread(messages, ChunkParams(window_tokens=160), counter())


@pytest.mark.parametrize("kwargs", [{"window_tokens": MAX_WINDOW_TOKENS + 1}, {"window_tokens": 0},
                                    {"overlap_messages": -1}])
def test_params_outside_the_model_window_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(InvalidInputError):
        ChunkParams(**kwargs)


def test_message_lines_give_each_message_its_own_line():
    at = datetime(2024, 1, 1, tzinfo=timezone.utc)
    contents = ["first line\nwith a newline", "second", "third one"]
    messages = [Message(f"m{i}", "t", "u", i + 1, "user", c, at, date(2024, 1, 1), "c") for i, c in enumerate(contents)]
    [chunk] = chunk_thread(messages, ChunkParams(window_tokens=200, overlap_messages=0), WordPieceCounter())
    assert chunk.message_lines() == tuple(f"User: {c}" for c in contents)


def test_lines_of_splits_a_window_at_its_line_ends() -> None:
    from indexers.chunking import lines_of

    assert lines_of("Alice: hi\nBob: yes", (9, 18)) == ("Alice: hi", "Bob: yes")
    assert lines_of("one line", ()) == ("one line",)  # no line ends: the whole text


def test_one_line_of_a_window_is_the_line_lines_of_gives():
    at = datetime(2024, 1, 1, tzinfo=timezone.utc)
    contents = ["first line\nwith a newline", "", "third one", "x" * 50]
    messages = [Message(f"m{i}", "t", "u", i + 1, "user", c, at, date(2024, 1, 1), "c") for i, c in enumerate(contents)]
    [chunk] = chunk_thread(messages, ChunkParams(window_tokens=200, overlap_messages=0), WordPieceCounter())
    assert [chunk.message_line(i) for i in range(len(contents))] == list(chunk.message_lines())
    assert line_of("one line", (), 0) == "one line"
    with pytest.raises(IndexError):
        line_of("one line", (), 1)


@PROPERTY
@given(st.lists(st.text(alphabet=PLAIN, max_size=30) | st.sampled_from(WORDS), max_size=120).map(" ".join),
       st.integers(1, 40))
def test_word_plan_cuts_where_the_token_plan_cuts(text: str, max_tokens: int) -> None:
    """Plain text is split word by word (`_split_words`); the plan over every token's start that
    it replaced must give the same pieces and counts whenever it applies."""
    from indexers.wordpieces import _split_at

    c = counter()
    planned = c._split_words(text, max_tokens) if c.additive(text) else None
    tokens = c._plain_starts(text, max_tokens) if c.additive(text) else None
    assert (planned is None) == (tokens is None)
    if planned is not None and tokens is not None:
        starts, word_start = tokens
        pieces = _split_at(text, starts, word_start, max_tokens, lambda piece: True)
        ends = [bisect.bisect_left(starts, end) for end in itertools.accumulate(map(len, pieces))]
        assert planned == list(zip(pieces, (b - a for a, b in zip([0, *ends], ends))))


def test_word_plan_cuts_long_plain_messages_as_the_token_plan_does() -> None:
    c = counter()
    for n, budget in ((400, 7), (900, 60), (50, 3), (2000, 250)):
        text = words(n) + " end. " + words(n // 3, "v")
        starts, word_start = c._plain_starts(text, budget)
        from indexers.wordpieces import _split_at
        pieces = _split_at(text, starts, word_start, budget, lambda piece: True)
        assert [p for p, _ in c._split_words(text, budget)] == pieces
