"""The BM25 tokenizer: identifiers, accents, CJK, stop words, stemming, determinism."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InvalidInputError
from indexers.lexical import (_JOINED_RE, ENGLISH_STOPWORDS, FRENCH_STOPWORDS, LexicalTokenizer, TokenizerParams,
                              _chunk_re, _expand, _expanded, fold)

TOK = LexicalTokenizer()
RAW = LexicalTokenizer(TokenizerParams(stemming=False, stopwords=False))


def matches(query: str, text: str, tokenizer: LexicalTokenizer = TOK) -> set[str]:
    """Query tokens that the text also yields: what BM25 would score on."""
    return set(tokenizer.tokenize(query)) & set(tokenizer.tokenize(text))


def test_order_id_matches_exactly_and_by_number() -> None:
    text = "Your order A-7731 shipped yesterday."
    assert {"a-7731", "7731"} <= matches("order A-7731", text)
    assert "7731" in matches("7731", text)
    assert "a-7732" not in TOK.tokenize(text)
    assert "a-7731" not in matches("order A-7732", text)


def test_version_numbers_are_kept_whole_and_split() -> None:
    tokens = TOK.tokenize("We run PostgreSQL 15.4.")
    assert {"postgresql", "15.4", "15", "4"} <= set(tokens)
    assert "15.4." not in tokens
    assert set(TOK.tokenize("PostgreSQL 15.4")) <= set(tokens)
    assert "15.4" not in TOK.tokenize("PostgreSQL 15.5")


@pytest.mark.parametrize("ident", ["ECONNRESET", "e2e", "1990s", "v1.2.3", "10:30", "0x1F"])
def test_identifiers_and_numbers_are_not_stemmed(ident: str) -> None:
    assert ident.lower() in TOK.tokenize(f"saw {ident} twice")


def test_stemming_applies_to_plain_words_only() -> None:
    assert TOK.tokenize("running connections") == ["run", "connect"]
    assert RAW.tokenize("running connections") == ["running", "connections"]
    assert matches("connection", "the connections dropped") == {"connect"}


def test_underscore_identifiers_match_whole_and_by_part() -> None:
    tokens = RAW.tokenize("set max_tokens and __init__")
    assert {"max", "tokens", "max_tokens", "init"} <= set(tokens)
    assert "__init__" not in tokens
    assert "max_tokens" in matches("max_tokens", "raise max_tokens to 512")


def test_emails_paths_and_urls_keep_joined_forms() -> None:
    tokens = set(RAW.tokenize("mail bob@example.com about src/app/main.py"))
    assert {"bob@example.com", "bob", "example", "com", "src/app/main.py", "main", "py"} <= tokens


@pytest.mark.parametrize("variant", ["cafe", "café", "CAFÉ", "cafe\u0301", "Café"])
def test_french_accents_fold(variant: str) -> None:
    assert TOK.tokenize(variant) == ["cafe"]


def test_accented_sentence_matches_unaccented_query() -> None:
    query = TOK.tokenize("ecole elevee")
    assert len(query) == 2 and matches("ecole elevee", "L'école était très élevée") == set(query)


def test_nfkc_folds_fullwidth_and_ligatures() -> None:
    assert RAW.tokenize("ＡＢＣ１２３ ﬁle") == ["abc123", "file"]


def test_stopwords_english_and_french() -> None:
    assert TOK.tokenize("the cat and the hat") == ["cat", "hat"]
    assert TOK.tokenize("le chat et les chiens sont à la maison") == ["chat", "chien", "maison"]
    assert "the" in LexicalTokenizer(TokenizerParams(stopwords=False)).tokenize("the cat")
    assert {"ete", "a", "ou"} <= FRENCH_STOPWORDS  # stored accent-stripped, like tokens
    assert "son" not in FRENCH_STOPWORDS and "the" in ENGLISH_STOPWORDS


def test_chinese_query_gets_bigrams_that_match() -> None:
    text = "我们明天去北京开会"
    tokens = TOK.tokenize(text)
    assert tokens[:2] == ["我们", "们明"] and "北京" in tokens
    assert matches("北京开会", text) == {"北京", "京开", "开会"}
    assert not matches("上海", text)


def test_japanese_mixed_scripts() -> None:
    text = "東京タワーに行きました"
    assert {"東京", "タワ", "ワー"} <= matches("東京タワー", text)
    assert TOK.tokenize("iPhone買った") == ["iphon", "買っ", "った"]


def test_korean_bigrams_and_lone_char() -> None:
    assert TOK.tokenize("안녕하세요") == ["안녕", "녕하", "하세", "세요"]
    assert TOK.tokenize("東") == ["東"]


def test_cjk_bigrams_can_be_disabled() -> None:
    plain = LexicalTokenizer(TokenizerParams(cjk_bigrams=False))
    assert plain.tokenize("北京开会 ok") == ["北京开会", "ok"]


def test_combining_marks_of_other_scripts_stay_inside_words() -> None:
    assert RAW.tokenize("हिन्दी भाषा") == ["हिन्दी", "भाषा"]


def test_empty_and_punctuation_only() -> None:
    assert TOK.tokenize("") == []
    assert TOK.tokenize(" -- ... !! __ ") == []


def test_rejects_non_text() -> None:
    with pytest.raises(InvalidInputError):
        TOK.tokenize(b"bytes")  # type: ignore[arg-type]


def test_tokenize_many_equals_tokenize() -> None:
    texts = ["Running tests on e2e", "", "東京タワー", "café A-7731", "the"]
    assert TOK.tokenize_many(texts) == [TOK.tokenize(t) for t in texts]


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_any_text_yields_clean_deterministic_tokens(text: str) -> None:
    tokens = TOK.tokenize(text)
    assert tokens == TOK.tokenize(text)
    assert all(t and not any(c.isspace() for c in t) for t in tokens)
    assert TOK.tokenize_many([text, text]) == [tokens, tokens]


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60))
def test_ascii_case_does_not_matter(text: str) -> None:
    assert TOK.tokenize(text.upper()) == TOK.tokenize(text.lower())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["Re", "7", "x", "_", "-", ".", "/", ":", "@", "'", ",", " ", "\n", "!", "é", "\t"]),
                max_size=40).map("".join))
def test_an_ascii_text_gives_the_chunks_of_the_general_pattern(text: str) -> None:
    """ASCII texts are scanned with a simpler pattern; the chunks are the ones the pattern for any
    script finds, expanded where a connector joins words."""
    folded = fold(text)
    chunks = _chunk_re().findall(folded)
    assert RAW.tokenize(text) == (_expanded(chunks) if "_" in folded or _JOINED_RE.search(folded) else chunks)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["The", "meetings", "moved", "to", "Tuesday", "café", "東京タワー", "order_id", "v1.2",
                                 "don't", "et", "les", "running", "x" * 30, "ÉTÉ", "snake_case", "a-b"]), max_size=30))
def test_tokens_from_the_memo_are_the_tokens_of_a_fresh_tokenizer(words: list[str]) -> None:
    """A warm tokenizer reads every token from its memo in one pass; it must give what computing
    them afresh gives, stop words dropped in place."""
    text = " ".join(words)
    warm = LexicalTokenizer()
    first = warm.tokenize(text)
    assert warm.tokenize(text) == first == LexicalTokenizer().tokenize(text)
    assert warm.tokenize(text + " " + text) == first + first


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["order", "a-7731", "v1.2.3", "order_id", "__init__", "me@x.org", "usr/bin", "東京",
                                 "café-bar", "x_", "15", "_"]), max_size=40))
def test_chunks_with_connectors_expand_in_place(chunks: list[str]) -> None:
    """The expansion of a text's few joined chunks, found at once, is the chunk-by-chunk expansion."""
    by_chunk = [token for chunk in chunks for token in ((chunk,) if chunk.isalnum() else _expand(chunk))]
    assert _expanded(list(chunks)) == by_chunk


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["Note", "…", "...", "x…y", "ÉTÉ", "ﬁne", "A-1", " ", "ǅ", "\u0301"]), max_size=12).map("".join))
def test_an_ellipsis_folds_as_nfkc_folds_it(text: str) -> None:
    """The ellipsis' shortcut gives what NFKC, casefold and the diacritics' stripping give."""
    reference = unicodedata.normalize("NFKC", text).casefold()
    if not reference.isascii():
        stripped = "".join(c for c in unicodedata.normalize("NFD", reference) if not unicodedata.combining(c))
        reference = unicodedata.normalize("NFC", stripped)
    assert fold(text) == reference
