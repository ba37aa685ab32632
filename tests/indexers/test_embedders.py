"""The MiniLM embedders against the real shipped models (no mocks of the model)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from engine.errors import EmbeddingUnavailableError, InvalidInputError
from indexers.embedders import (
    ONNX_MODEL_NAME,
    TORCH_MODEL_NAME,
    DeadlineEmbedder,
    Embedder,
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    load_embedder,
)

ROOT = Path(__file__).resolve().parents[2]

TEXTS = [
    "I went hiking in the mountains last weekend.",
    "We climbed a trail up the hills on Saturday.",
    "The quarterly tax report is due tomorrow morning.",
    "Can you help me fix the segmentation fault in my C code?",
    "",
    "word " * 600,  # far past 256 word pieces: must be truncated, not rejected
]


@pytest.fixture(scope="module")
def torch_embedder() -> SentenceTransformerEmbedder:
    embedder = load_embedder("torch")
    assert isinstance(embedder, SentenceTransformerEmbedder)
    return embedder


@pytest.fixture(scope="module")
def onnx_embedder() -> OnnxEmbedder:
    embedder = load_embedder("onnx")
    assert isinstance(embedder, OnnxEmbedder)
    return embedder


@pytest.fixture(params=["torch", "onnx"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    return request.getfixturevalue(f"{request.param}_embedder")


@pytest.mark.slow
def test_shape_dtype_and_unit_rows(embedder: Embedder) -> None:
    vectors = embedder.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 384) == (len(TEXTS), embedder.dim)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert isinstance(embedder, Embedder) and embedder.max_tokens == 256


@pytest.mark.slow
def test_close_pair_scores_above_unrelated_pair(embedder: Embedder) -> None:
    hike, climb, tax = embedder.embed(TEXTS[:3])
    assert float(hike @ climb) > float(hike @ tax) + 0.2


@pytest.mark.slow
def test_empty_input_gives_zero_rows(embedder: Embedder) -> None:
    vectors = embedder.embed([])
    assert vectors.shape == (0, 384) and vectors.dtype == np.float32


@pytest.mark.slow
def test_bare_string_is_refused(embedder: Embedder) -> None:
    with pytest.raises(InvalidInputError):
        embedder.embed("a single string")  # type: ignore[arg-type]


@pytest.mark.slow
def test_batching_keeps_input_order(onnx_embedder: OnnxEmbedder) -> None:
    # The ONNX path sorts by length and pads per batch: each row must still match its own text.
    small_batches = OnnxEmbedder(batch_size=2)
    one_by_one = np.vstack([onnx_embedder.embed([t]) for t in TEXTS])
    np.testing.assert_allclose(small_batches.embed(TEXTS), one_by_one, atol=1e-4)


@pytest.mark.slow
def test_onnx_agrees_with_torch(torch_embedder: SentenceTransformerEmbedder, onnx_embedder: OnnxEmbedder) -> None:
    cosines = np.sum(torch_embedder.embed(TEXTS) * onnx_embedder.embed(TEXTS), axis=1)
    assert cosines.min() >= 0.99, cosines


@pytest.mark.slow
def test_names_differ_per_backend(torch_embedder: Embedder, onnx_embedder: Embedder) -> None:
    # Vectors of the two backends must never share an index: the name goes into manifests.
    assert (torch_embedder.name, onnx_embedder.name) == (TORCH_MODEL_NAME, ONNX_MODEL_NAME)


def test_load_embedder_none_and_unknown() -> None:
    assert load_embedder("none") is None
    with pytest.raises(InvalidInputError):
        load_embedder("tensorflow")  # type: ignore[arg-type]


@pytest.mark.process
def test_import_is_cheap() -> None:
    heavy = "{'torch', 'onnxruntime', 'sentence_transformers'}"
    code = f"import sys, indexers.embedders; print(sorted({heavy} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
def test_deadline_times_out_then_recovers(onnx_embedder: OnnxEmbedder) -> None:
    deadline = DeadlineEmbedder(onnx_embedder, timeout_s=60)
    long_batch = [f"message {i}: " + "we talked about the trip " * 20 for i in range(16)]
    try:
        started = time.perf_counter()
        with pytest.raises(EmbeddingUnavailableError, match="longer than"):
            deadline.embed_within(long_batch, 1e-6)
        assert time.perf_counter() - started < 1.0  # it gave up without waiting for the batch
        vectors = deadline.embed_within(TEXTS[:2], 60)
        np.testing.assert_allclose(vectors, onnx_embedder.embed(TEXTS[:2]), atol=1e-5)
        assert deadline.available
    finally:
        deadline.close()


class _Unloadable:
    """Stands in for a backend whose model files are missing (what the backends raise then)."""

    name, dim, max_tokens = "broken", 384, 256

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        raise EmbeddingUnavailableError("model files missing")


class _Crashing(_Unloadable):
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        raise RuntimeError("onnxruntime exploded")


class _Stuck(_Unloadable):
    """A model call that hangs until released: stands in for a pathological slow batch."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.release.wait(30)
        return np.ones((len(texts), 384), dtype=np.float32)


@pytest.fixture
def stuck() -> Iterator[tuple[_Stuck, DeadlineEmbedder]]:
    """A model held until released, behind a DeadlineEmbedder; released and closed after the test."""
    inner = _Stuck()
    deadline = DeadlineEmbedder(inner)
    try:
        yield inner, deadline
    finally:
        inner.release.set()
        deadline.close()


def test_deadline_cancels_queued_calls_behind_a_stuck_one(stuck: tuple[_Stuck, DeadlineEmbedder]) -> None:
    inner, deadline = stuck
    for timeout in (1.0, 0.05, 0.05):  # the first hangs on the worker, the next two queue and give up
        with pytest.raises(EmbeddingUnavailableError):
            deadline.embed_within(["x"], timeout)
    assert inner.calls == 1
    inner.release.set()
    assert deadline.embed_within(["x", "y"], 5).shape == (2, 384)
    assert inner.calls == 2  # the two timed-out queued calls were cancelled, never run


def test_started_vectors_arrive_while_the_caller_works(stuck: tuple[_Stuck, DeadlineEmbedder]) -> None:
    inner, deadline = stuck
    pending = deadline.start(["x", "y"], 5)  # returns while the model is still held
    assert not pending.done()
    inner.release.set()
    assert pending.result().shape == (2, 384)


def test_a_started_call_counts_its_deadline_from_the_start(stuck: tuple[_Stuck, DeadlineEmbedder]) -> None:
    _, deadline = stuck
    pending = deadline.start(["x"], 1.0)
    time.sleep(1.1)  # the caller's own work outlasted the deadline
    waited = time.perf_counter()
    with pytest.raises(EmbeddingUnavailableError, match="longer than 1 s"):
        pending.result()
    assert time.perf_counter() - waited < 0.5  # no second deadline of waiting


def test_deadline_load_failure_marks_unavailable() -> None:
    inner = _Unloadable()
    deadline = DeadlineEmbedder(inner)
    try:
        for _ in range(2):
            with pytest.raises(EmbeddingUnavailableError):
                deadline.embed_within(["hello"], 5)
        assert not deadline.available
        assert inner.calls == 1  # the second call failed fast, without retrying the load
    finally:
        deadline.close()


def test_deadline_wraps_model_crash_and_stays_available() -> None:
    deadline = DeadlineEmbedder(_Crashing())
    try:
        with pytest.raises(EmbeddingUnavailableError, match="exploded"):
            deadline.embed(["hello"])
        assert deadline.available
    finally:
        deadline.close()


@pytest.mark.parametrize("timeout", [0.0, -1.0])
def test_deadline_refuses_non_positive_timeout(timeout: float) -> None:
    deadline = DeadlineEmbedder(_Unloadable())
    try:
        with pytest.raises(InvalidInputError):
            deadline.embed_within(["x"], timeout)
    finally:
        deadline.close()
