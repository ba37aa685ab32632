"""`ConversationEngine.reindex_on_ray`'s work: the engine's side of a Ray rebuild (docs/scaling.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from engine.errors import InvalidInputError

if TYPE_CHECKING:
    from engine.api import ConversationEngine
    from indexers.distributed import RayReindexReport

__all__ = ["rebuild_on_ray"]


def rebuild_on_ray(engine: ConversationEngine, users: list[str], *, address: str | None,
                   embed_actors: int | None, shards: str | None,
                   progress: Callable[[int, int], None] | None) -> RayReindexReport:
    """Run the job under every user's write lock; when it published to this home's shards, the
    engine drops its loaded copies and the vectors and summary indexes the new shards no longer use."""
    from indexers.distributed import RayOptions, reindex_on_ray  # only this job needs Ray
    from indexers.shard_storage import ShardStorage

    pipeline = engine.pipeline
    if pipeline.embedder is None or pipeline.cache is None:
        raise InvalidInputError("the Ray executor re-embeds: configure an embedding backend, or use `--executor local`")
    storage = ShardStorage(shards if shards is not None else pipeline.root)
    here = storage.local == pipeline.root.absolute()
    options = RayOptions(address=address, embed_actors=embed_actors, backend=engine.settings.embedding_backend,
                         model=engine.settings.embedding_model)
    with engine.write_lock:
        try:
            report = reindex_on_ray(engine.store, pipeline.cache, pipeline.params, pipeline.spec(), users, storage,
                                    options, progress)
        finally:
            for user in users if here else ():
                pipeline.unload(user)  # its next use loads what the job published
        for rebuilt in report.rebuilt if here else ():
            engine.deleter.forget_unused_vectors(rebuilt.user_id)
            engine.summary_index.forget(rebuilt.user_id)
        for user in users:  # summaries' vectors live in this store's cache, whichever storage took the shards
            engine.summary_index.embed_pending(user)
    return report
