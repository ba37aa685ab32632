"""The model a query is embedded with: an int8 copy of the shipped MiniLM, derived once per machine.

Why: the shipped ONNX file stores int8 weights that onnxruntime turns back into float32 at load, so
a query runs float matrix products (~4 ms of a search's 10 on two cores). Quantising the weights per
output channel and the activations per call (onnxruntime's dynamic quantisation, integer products)
embeds a query in about half that. Its vectors lie within cosine 0.98-0.99 of the shipped model's,
and against the documents' vectors, which stay the shipped model's, LoCoMo dev recall is unchanged
(docs/benchmarks.md, issue 18, tenth round). Documents keep the shipped model: their vectors are
cached and compared across versions.

The copy lives in a cache directory under a name holding the source's hash and onnxruntime's
version, written through a temporary file and a rename: two processes deriving it at once both end
with the same whole file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from engine.errors import EmbeddingUnavailableError

__all__ = ["default_cache_dir", "int8_query_model"]

_PREFIX = "minilm-query-int8"


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/convsearch (~/.cache/convsearch): shared by every data directory of the user."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home directory (a service account): a directory every run can find
            base = tempfile.gettempdir()
    return Path(base) / "convsearch"


def int8_query_model(source: Path, cache_dir: Path) -> Path:
    """The int8 copy of `source` in `cache_dir`, derived on first use (~2.5 s); raises
    EmbeddingUnavailableError saying why when it cannot be made (the caller keeps `source`)."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise EmbeddingUnavailableError(f"the int8 query model needs `pip install onnxruntime` ({exc})") from exc
    target = cache_dir / f"{_PREFIX}-{_digest(source)}-ort{ort.__version__}.onnx"
    if target.is_file():
        return target
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".derive-") as scratch:
            folded, quantised = Path(scratch) / "folded.onnx", Path(scratch) / "query.onnx"
            _fold_weights(source, folded)
            _quantise(folded, quantised)
            os.replace(quantised, target)
    except EmbeddingUnavailableError:
        raise
    except Exception as exc:  # OSError, onnx's and onnxruntime's own errors: all mean "keep the source"
        raise EmbeddingUnavailableError(f"could not derive the int8 query model in {cache_dir}: {exc}") from exc
    return target


def _digest(path: Path) -> str:
    """The file's SHA-256 (first 16 hex digits), read once per process while it is unchanged."""
    stat = path.stat()
    return _digest_of(path, stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=4)
def _digest_of(path: Path, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()[:16]


def _fold_weights(source: Path, folded: Path) -> None:
    """`source` with its weights' dequantisation computed once (onnxruntime's basic graph rewrites),
    so the quantiser sees plain float weights."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(folded)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def _quantise(folded: Path, quantised: Path) -> None:
    """Weights int8 per output channel, activations quantised per call (integer products)."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:  # the quantiser needs the onnx package; a derived copy does not
        raise EmbeddingUnavailableError(f"deriving the int8 query model needs `pip install onnx` ({exc})") from exc
    with _quiet_quantiser():
        quantize_dynamic(folded, quantised, weight_type=QuantType.QInt8, per_channel=True)


class _QuantiserAdvice(logging.Filter):
    """Drops the quantiser's advice to pre-process a model for static quantisation: it does not
    apply to dynamic quantisation. It logs through the root logger, so the filter sits there."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "onnxruntime" not in record.pathname


@contextmanager
def _quiet_quantiser() -> Iterator[None]:
    advice = _QuantiserAdvice()
    logging.getLogger().addFilter(advice)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(advice)
