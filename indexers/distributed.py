"""Reindex many users on Ray: the job a model change needs, spread over a cluster (`pip install convsearch[ray]`).

The driver (this process) is the only one that opens the store: it reads each user's messages once
as Arrow and puts them in Ray's object store. Per user, a task chunks and builds BM25
(`shard_build.build_lexical`); the driver looks the texts up in the embedding cache and sends
only the missing ones, in batches, to a pool of actors that each load the model once; each batch's
vectors are cached as they arrive (a killed job loses at most the batches in flight). A last task
per user builds HNSW and publishes the shard (version directory + CURRENT flip, `ShardStorage`),
so a killed job leaves every user old or new. A rerun skips users already at the target: same
build spec, watermarks at the store's, every window with a vector.

At most `users_in_flight` users are between "read" and "published" at a time, so the driver's
memory stays bounded however many users there are.
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np

from engine.errors import InvalidInputError, ReindexIncompleteError
from engine.store.core import Store
from engine.store.embedding_cache import EmbeddingCache
from indexers.manifest import BuildSpec
from indexers.pipeline import IndexReport, PipelineParams
from indexers.shard_build import UserJob, build_lexical, finish_and_publish, texts_to_embed
from indexers.shard_storage import ShardStorage

__all__ = ["RayOptions", "RayReindexReport", "reindex_on_ray", "import_ray"]

Progress = Callable[[int, int], None]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colour codes Ray puts in its errors' text


@dataclass(frozen=True, slots=True)
class RayOptions:
    address: str | None = None  # None: start a local Ray instance for this job
    embed_actors: int | None = None  # None: one per CPU of the cluster but one (left for the tasks)
    backend: Literal["torch", "onnx", "none"] = "onnx"  # the embedding backend each actor loads
    model: str = "all-MiniLM-L6-v2"  # and the model (a split model is joined in each node's own cache)
    batch_texts: int = 256  # texts per actor call: cached as soon as it returns
    retries: int = 2  # Ray's own retries of a task or an actor call whose worker died
    users_in_flight: int = 8
    local_cpus: int = 2  # CPUs of the local instance started without `address`


@dataclass(frozen=True, slots=True)
class RayReindexReport:
    rebuilt: list[IndexReport]
    skipped: list[str]  # already at the target: nothing to do
    seconds: float
    embed_actors: int
    driver_seconds: dict[str, float]  # where the driver's own time went: read, cache_get, cache_put, waiting


def import_ray() -> Any:
    """The ray module, or a clear error saying how to get it."""
    try:
        import ray
    except ImportError:
        raise InvalidInputError(
            "the Ray executor needs Ray: `pip install 'convsearch[ray]'` (or use `--executor local`)"
        ) from None
    return ray


@dataclass
class _User:
    job: UserJob
    started: float
    build: Any = None  # ObjectRef of the LexicalBuild (never fetched here)
    hashes: list[str] = field(default_factory=list)
    blocks: list[Any] = field(default_factory=list)  # arrays (from the cache) and ObjectRefs (from actors)
    waiting: int = 0  # embedding batches not back yet
    reused: int = 0
    computed: int = 0
    messages: int = 0


def reindex_on_ray(store: Store, cache: EmbeddingCache, params: PipelineParams, spec: BuildSpec,
                   user_ids: list[str], storage: ShardStorage, options: RayOptions,
                   progress: Progress | None = None) -> RayReindexReport:
    """Bring every user's published shard to `spec`, rebuilding from the store on Ray."""
    if spec.model is None:
        raise InvalidInputError("the Ray executor re-embeds: configure an embedding backend, or use `--executor local`")
    ray = import_ray()
    started = time.perf_counter()
    own_instance = _connect(ray, options)
    try:
        jobs = [_job(store, u) for u in user_ids]
        todo = [j for j in jobs if not _at_target(storage.live(j.user_id), spec, j)]
        rebuilding = {j.user_id for j in todo}
        skipped = [j.user_id for j in jobs if j.user_id not in rebuilding]
        actors = _start_actors(ray, options, spec) if todo else []
        driver = _Driver(ray, store, cache, params, spec, storage, options, actors, progress)
        rebuilt, failed = driver.run(todo)
    finally:
        if own_instance:
            ray.shutdown()
    if failed:
        raise ReindexIncompleteError(
            f"{len(failed)} of {len(todo)} user(s) were not rebuilt and keep their previous index ("
            + "; ".join(f"{u}: {why}" for u, why in sorted(failed.items())[:5])
            + "): run the same command again, it resumes with them"
        )
    timings = {k: round(v, 3) for k, v in driver.seconds.items()}
    return RayReindexReport(rebuilt, skipped, time.perf_counter() - started, len(actors), timings)


def _connect(ray: Any, options: RayOptions) -> bool:
    """Join the cluster at `address`, or start a local instance; True when this job started it."""
    if ray.is_initialized():
        return False
    kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        if options.address:
            ray.init(address=options.address, **kwargs)
            return True
        ray.init(num_cpus=options.local_cpus, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"reach the Ray cluster at {options.address!r}" if options.address else "start a local Ray instance"
        raise InvalidInputError(f"cannot {where}: {exc}") from None
    return True


def _job(store: Store, user_id: str) -> UserJob:
    return UserJob(user_id, tuple(store.last_seqs(user_id).items()))


def _at_target(live: Any, spec: BuildSpec, job: UserJob) -> bool:
    return (live is not None and live.all_vectors and not spec.differences(live.manifest.spec)
            and dict(live.manifest.watermarks) == job.watermarks)


class _EmbedActor:
    """Loads the model once; embeds batches of texts for as long as the job runs."""

    def __init__(self, backend: Literal["torch", "onnx", "none"], model: str, batch_size: int) -> None:
        from indexers.embedders import load_embedder

        # one intra-op thread: Ray gives the actor one CPU, a second thread would only spin-wait
        embedder = load_embedder(backend, batch_size=batch_size, num_threads=1, model=model)
        if embedder is None:
            raise InvalidInputError("the Ray executor re-embeds: configure an embedding backend (onnx or torch)")
        self.embedder = embedder

    def model(self) -> str:
        return self.embedder.name

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embedder.embed(texts)


def _start_actors(ray: Any, options: RayOptions, spec: BuildSpec) -> list[Any]:
    cpus = int(ray.cluster_resources().get("CPU", 1))
    count = options.embed_actors if options.embed_actors is not None else max(1, cpus - 1)
    if not 1 <= count < max(cpus, 2):
        raise InvalidInputError(
            f"--embed-actors {count}: the cluster has {cpus} CPU(s); each actor holds one and the "
            f"chunking tasks need one, so use 1 to {max(1, cpus - 1)}"
        )
    remote = ray.remote(num_cpus=1, max_restarts=options.retries, max_task_retries=options.retries)(_EmbedActor)
    actors = [remote.remote(options.backend, options.model, 32) for _ in range(count)]
    models = set(ray.get([a.model.remote() for a in actors]))
    if models != {spec.model}:
        raise InvalidInputError(f"the actors loaded {sorted(models)} but the index is built with {spec.model!r}: "
                                "set CONVSEARCH_EMBEDDING_BACKEND and CONVSEARCH_EMBEDDING_MODEL as the engine's")
    return actors


def _lexical_task(job: UserJob, messages: Any, params: PipelineParams, spec: BuildSpec) -> tuple[Any, dict[str, str]]:
    build = build_lexical(job, messages, params, spec)
    return build, texts_to_embed(list(build.chunks.values()))


class _Driver:
    """The job's event loop: start users, route finished refs to the next step, publish."""

    def __init__(self, ray: Any, store: Store, cache: EmbeddingCache, params: PipelineParams, spec: BuildSpec,
                 storage: ShardStorage, options: RayOptions, actors: list[Any], progress: Progress | None) -> None:
        self.ray, self.store, self.cache, self.params, self.spec = ray, store, cache, params, spec
        self.storage, self.options, self.actors, self.progress = storage, options, actors, progress
        retry = dict(num_cpus=1, max_retries=options.retries)
        self.lexical = ray.remote(**retry, num_returns=2)(_lexical_task)
        self.finish = ray.remote(**retry)(finish_and_publish)
        self.refs: dict[Any, tuple[str, str, list[str]]] = {}  # ref -> (user, step, batch hashes)
        self.users: dict[str, _User] = {}
        self.next_actor = 0
        self.rebuilt: list[IndexReport] = []
        self.failed: dict[str, str] = {}
        self.seconds = dict.fromkeys(("read", "cache_get", "cache_put", "waiting"), 0.0)

    def _timed(self, phase: str, started: float) -> None:
        self.seconds[phase] += time.perf_counter() - started

    def run(self, todo: list[UserJob]) -> tuple[list[IndexReport], dict[str, str]]:
        queue, total = deque(todo), len(todo)
        while queue or self.users:
            while queue and len(self.users) < self.options.users_in_flight:
                self._start(queue.popleft())
            began = time.perf_counter()
            ready, _ = self.ray.wait(list(self.refs), num_returns=1)
            self._timed("waiting", began)
            user_id, step, hashes = self.refs.pop(ready[0])
            if user_id not in self.users:
                continue  # that user failed already
            try:
                self._advance(self.users[user_id], step, ready[0], hashes)
            except self.ray.exceptions.RayError as exc:
                self._fail(user_id, exc)
            if self.progress:
                self.progress(len(self.rebuilt) + len(self.failed), total)
        return self.rebuilt, self.failed

    def _start(self, job: UserJob) -> None:
        user = self.users[job.user_id] = _User(job, time.perf_counter())
        table = self.store.messages_arrow(job.user_id)
        user.messages = table.num_rows
        table_ref = self.ray.put(table)
        self._timed("read", user.started)
        user.build, texts = self.lexical.remote(job, table_ref, self.params, self.spec)
        self.refs[texts] = (job.user_id, "lexical", [])

    def _advance(self, user: _User, step: str, ref: Any, hashes: list[str]) -> None:
        if step == "lexical":
            self._embed(user, self.ray.get(ref))
        elif step == "embed":
            vectors, began = self.ray.get(ref), time.perf_counter()
            self.cache.put(user.job.user_id, hashes, vectors)  # filled as batches arrive
            self._timed("cache_put", began)
            user.waiting -= 1
        else:
            manifest = self.ray.get(ref)
            report = IndexReport(user.job.user_id, user.messages, manifest.chunks, 0, user.reused, user.computed,
                                 time.perf_counter() - user.started)
            self.rebuilt.append(report)
            del self.users[user.job.user_id]
            return
        if step != "publish" and user.waiting == 0:
            ref = self.finish.remote(user.build, self.params, self.storage.url, user.hashes, *user.blocks)
            self.refs[ref] = (user.job.user_id, "publish", [])

    def _embed(self, user: _User, wanted: dict[str, str]) -> None:
        """Vectors from the cache where it has them; the rest in batches to the actors."""
        user_id, began = user.job.user_id, time.perf_counter()
        known = self.cache.get(user_id, list(wanted))
        self._timed("cache_get", began)
        if known:
            user.hashes.extend(known)
            user.blocks.append(np.stack(list(known.values())).astype(np.float32))
        missing = sorted(h for h in wanted if h not in known)
        user.reused, user.computed = len(known), len(missing)
        for start in range(0, len(missing), self.options.batch_texts):
            part = missing[start:start + self.options.batch_texts]
            actor = self.actors[self.next_actor % len(self.actors)]
            self.next_actor += 1
            ref = actor.embed.remote([wanted[h] for h in part])
            self.refs[ref] = (user_id, "embed", part)
            user.hashes.extend(part)
            user.blocks.append(ref)
            user.waiting += 1

    def _fail(self, user_id: str, exc: Exception) -> None:
        first = _ANSI.sub("", str(exc)).splitlines()[0][:200] if str(exc) else ""  # Ray colours its task names
        self.failed[user_id] = f"{type(exc).__name__}: {first}"
        self.users.pop(user_id, None)
