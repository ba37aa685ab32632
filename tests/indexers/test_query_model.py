"""The int8 query model: derived once from the shipped graph, close to it, and never in the way."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.api import ConversationEngine
from engine.config import Settings
from engine.errors import EmbeddingUnavailableError
from indexers.embedders import ONNX_MODEL_NAME, QUERY_MODEL_NAME, OnnxEmbedder, query_embedder_for
from indexers.model_files import onnx_model_path
from indexers.query_model import int8_query_model
from tests.support import HashEmbedder

pytestmark = pytest.mark.model

DOCUMENTS = [
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: We took the kids camping by the lake last weekend.",
    "Alice: OK, decision made: we go with PostgreSQL 15.4, not MySQL.",
    "Bob: The deploy failed with ECONNRESET while pulling the image.",
    "Joanna: I got another rejection from a production company today.",
    "Nate: My turtles love the new tank, they swim all day.",
    "Alice: Remind me to renew the TLS certificate before Friday.",
    "Bob: The quarterly tax report is due tomorrow morning.",
]
QUERIES = [
    "When did Caroline go to the support group?",
    "Where did Melanie go camping?",
    "which database did we choose?",
    "why did the deploy fail?",
    "what happened with Joanna's screenplay?",
    "what pets does Nate have?",
    "what should I renew before Friday?",
    "when is the tax report due?",
]


@pytest.fixture(scope="module")
def derived(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return int8_query_model(onnx_model_path(), tmp_path_factory.mktemp("models"))


def test_derived_once_under_a_name_that_holds_its_source(derived: Path) -> None:
    again = int8_query_model(onnx_model_path(), derived.parent)
    assert again == derived and again.stat().st_mtime_ns == derived.stat().st_mtime_ns  # reused, not rewritten
    assert [p.name for p in derived.parent.iterdir()] == [derived.name]  # no scratch file left behind
    assert derived.stat().st_size < onnx_model_path().stat().st_size * 1.5  # int8 weights, not float


def test_a_derived_copy_needs_no_quantiser(derived: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime.quantization", None)  # as without the onnx package
    assert int8_query_model(onnx_model_path(), derived.parent) == derived
    with pytest.raises(EmbeddingUnavailableError, match="pip install onnx"):
        int8_query_model(onnx_model_path(), tmp_path)
    assert not list(tmp_path.iterdir())  # the scratch directory went too


def test_query_vectors_stay_close_to_the_shipped_model(derived: Path) -> None:
    shipped = OnnxEmbedder()
    query = OnnxEmbedder(model_path=derived, name=QUERY_MODEL_NAME)
    cosines = (shipped.embed(QUERIES) * query.embed(QUERIES)).sum(axis=1)
    assert cosines.min() > 0.97
    documents = shipped.embed(DOCUMENTS)  # documents keep the shipped model's vectors
    best_shipped = np.argmax(shipped.embed(QUERIES) @ documents.T, axis=1)
    best_query = np.argmax(query.embed(QUERIES) @ documents.T, axis=1)
    assert best_query.tolist() == best_shipped.tolist() == list(range(len(QUERIES)))


def test_queries_get_the_copy_on_one_thread(derived: Path) -> None:
    documents = OnnxEmbedder()
    query = query_embedder_for(documents, derived.parent)
    assert isinstance(query, OnnxEmbedder) and query.name == QUERY_MODEL_NAME
    assert query.model_path == derived and query.num_threads == 1  # the search's keyword side has the other core


def test_a_model_that_cannot_be_derived_leaves_the_documents_model(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    documents = OnnxEmbedder()
    with caplog.at_level(logging.WARNING, logger="convsearch"):
        assert query_embedder_for(documents, blocker / "models") is documents
    assert "query_model.unavailable" in caplog.text and str(blocker) in caplog.text
    assert blocker.read_text() == "not a directory"


def test_a_damaged_copy_leaves_the_documents_model(tmp_path: Path, derived: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    damaged = tmp_path / derived.name
    damaged.write_bytes(derived.read_bytes()[: derived.stat().st_size // 2])  # e.g. a disk that failed
    documents = OnnxEmbedder()
    with caplog.at_level(logging.WARNING, logger="convsearch"):
        assert query_embedder_for(documents, tmp_path) is documents
    assert "delete it to derive it again" in caplog.text and str(damaged) in caplog.text


def test_other_models_embed_their_own_queries(tmp_path: Path) -> None:
    hashed = HashEmbedder()
    assert query_embedder_for(hashed, tmp_path) is hashed
    assert query_embedder_for(None, tmp_path) is None
    assert not list(tmp_path.iterdir())  # nothing derived for them


def test_the_engine_embeds_queries_as_configured(tmp_path: Path, derived: Path) -> None:
    with ConversationEngine(tmp_path / "int8", settings=Settings(model_cache_dir=derived.parent)) as engine:
        assert engine.searcher.query_embedder.name == QUERY_MODEL_NAME
        assert engine.pipeline.embedder.name == ONNX_MODEL_NAME  # documents: the shipped graph
    with ConversationEngine(tmp_path / "same", settings=Settings(query_model="same", model_cache_dir=tmp_path / "no")) \
            as engine:
        assert engine.searcher.query_embedder.inner is engine.pipeline.embedder
    assert not (tmp_path / "no").exists()
