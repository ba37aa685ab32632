"""Which models the settings choose: one for the documents, and the one that embeds queries beside it."""

from __future__ import annotations

import logging

from engine.config import Settings
from engine.errors import EmbeddingUnavailableError
from indexers.embedders import Embedder, load_embedder, query_embedder_for
from indexers.query_model import default_cache_dir

__all__ = ["documents_embedder", "query_embedder"]

log = logging.getLogger("convsearch")


def documents_embedder(settings: Settings) -> Embedder | None:
    """The configured backend, loaded now; None (lexical search, logged) when it cannot load."""
    try:
        return load_embedder(settings.embedding_backend, batch_size=settings.embed_batch_size,
                             model=settings.embedding_model, cache_dir=settings.model_cache_dir)
    except EmbeddingUnavailableError as exc:
        log.warning("embedding.unavailable reason=%r fallback=lexical", exc.message)
        return None


def query_embedder(settings: Settings, documents: Embedder | None) -> Embedder | None:
    """What embeds queries beside `documents`: its int8 copy (`Settings.query_model`), or itself."""
    if settings.query_model == "same":
        return documents
    return query_embedder_for(documents, settings.model_cache_dir or default_cache_dir())
