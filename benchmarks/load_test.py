"""A bounded load test of the real HTTP server: mixed searches and ingests from a fixed number of
client threads for at most 60 s, on loopback only. Zero errors and zero lost messages, or it fails.

    python benchmarks/load_test.py --threads 8 --seconds 30          # MiniLM (the configured backend)
    python benchmarks/load_test.py --threads 2 --seconds 5 --lexical  # no model: the CI smoke run

The script starts `convsearch serve` in a subprocess on a free 127.0.0.1 port with a fresh home,
seeds a few users, runs the clients, then counts every user's turns twice (through
/api/messages/range while the server runs, through the store after it stops) against the ids the
server acknowledged. It prints p50/p99 latency per operation and the throughput, and exits 1 when
a request failed or an acknowledged message is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

__all__ = ["LoadConfig", "LoadResult", "run", "main"]

MAX_SECONDS = 60.0
PAGE = 10_000  # seqs per messages_range call (its widest range)
WORDS = ("invoice", "database", "postgres", "garden", "tomato", "deploy", "latency", "budget", "mochi", "kyoto",
         "bicycle", "migration", "backup", "refund", "coffee", "printer", "vacation", "contract", "ticket", "rust")


@dataclass(frozen=True, slots=True)
class LoadConfig:
    threads: int = 8
    seconds: float = 30.0
    users: int = 4
    search_share: float = 0.8  # the rest are ingests of 1-3 messages
    seed: int = 20240501
    lexical: bool = False  # serve without the embedding model


@dataclass(slots=True)
class _Log:
    """What one client thread saw: latencies per operation, failures, and the ids acknowledged."""

    sent: int = 0
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"search": [], "ingest": []})
    errors: list[str] = field(default_factory=list)
    acknowledged: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LoadResult:
    requests: int
    errors: int
    lost_messages: int
    acknowledged_messages: int
    stored_turns: int
    seconds: float
    throughput_rps: float
    latency_ms: dict[str, dict[str, float]]
    first_errors: tuple[str, ...]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_server(home: Path, port: int, lexical: bool) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if lexical:
        env["CONVSEARCH_EMBEDDING_BACKEND"] = "none"
    command = [sys.executable, "-c", "from engine.surfaces.cli import main; raise SystemExit(main())",
               "--home", str(home), "serve", "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_healthy(client: httpx.Client, server: subprocess.Popen[bytes], timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            errors = server.stderr.read().decode()  # type: ignore[union-attr]
            raise RuntimeError(f"the server exited: {errors[-2000:]}")
        try:
            if client.get("/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not become healthy in time")


def _sentence(rng: random.Random, n: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _seed_users(client: httpx.Client, users: list[str], rng: random.Random) -> dict[str, list[str]]:
    acknowledged: dict[str, list[str]] = {}
    for user in users:
        _checked(client.post("/api/users", json={"user_id": user}))
        body = {"user_id": user, "index": True, "messages": [
            {"role": ("user", "assistant")[i % 2], "content": _sentence(rng), "message_id": f"{user}-seed-{i}"}
            for i in range(20)]}
        acknowledged[user] = _checked(client.post("/api/messages", json=body))["inserted"]
    return acknowledged


def _checked(response: httpx.Response) -> Any:
    if response.status_code != 200:
        raise RuntimeError(f"{response.request.url.path} -> {response.status_code}: {response.text[:300]}")
    return response.json()


def _client_loop(base_url: str, cfg: LoadConfig, users: list[str], index: int, stop_at: float, log: _Log) -> None:
    """Requests until the deadline; every non-200 answer or transport failure is an error."""
    rng = random.Random(cfg.seed * 1000 + index)
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for n in range(1_000_000):  # bounded by the deadline long before this
            if time.monotonic() >= stop_at:
                return
            user = rng.choice(users)
            if rng.random() < cfg.search_share:
                op, body = "search", {"user_id": user, "query": _sentence(rng, rng.randint(1, 4)), "limit": 6}
                path = "/api/conversation/search"
            else:
                messages = [{"role": "user", "content": _sentence(rng), "message_id": f"{user}-t{index}-{n}-{i}"}
                            for i in range(rng.randint(1, 3))]
                op, body, path = "ingest", {"user_id": user, "messages": messages, "index": False}, "/api/messages"
            started = time.perf_counter()
            log.sent += 1
            try:
                response = client.post(path, json=body)
            except httpx.HTTPError as exc:
                log.errors.append(f"{op}: {type(exc).__name__}: {exc}")
                continue
            log.latencies[op].append(time.perf_counter() - started)
            if response.status_code != 200:
                log.errors.append(f"{op}: {response.status_code} {response.text[:200]}")
            elif op == "ingest":
                log.acknowledged.setdefault(user, []).extend(response.json()["inserted"])


def _lost_via_api(client: httpx.Client, expected: dict[str, set[str]]) -> int:
    lost = 0
    for user, ids in expected.items():
        stored = _checked(client.post("/api/messages/range", json={"user_id": user, "start_seq": 1, "end_seq": 10_001}))
        lost += len(ids - {m["message_id"] for m in stored})
    return lost


def _count_via_store(home: Path, expected: dict[str, set[str]]) -> tuple[int, int]:
    """After the server stopped, from the store itself (the source of truth): (lost, turns stored)."""
    from engine.api import ConversationEngine

    lost = stored_turns = 0
    with ConversationEngine(home, embedder=None) as engine:
        for user, ids in expected.items():
            last = engine.stats(user)["messages"]  # seqs run from 1 and nothing is deleted here
            stored = [m.message_id for start in range(1, last + 1, PAGE)
                      for m in engine.messages_range(user, start, min(start + PAGE, last + 1))]
            lost += len(ids - set(stored))
            stored_turns += len(stored)
    return lost, stored_turns


def _percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"count": 0, "p50": 0.0, "p99": 0.0}
    ms = np.asarray(samples) * 1000
    return {"count": len(samples), "p50": round(float(np.percentile(ms, 50)), 2),
            "p99": round(float(np.percentile(ms, 99)), 2)}


def run(cfg: LoadConfig, home: Path) -> LoadResult:
    """Start the server, seed, load, count, stop; the load phase never exceeds MAX_SECONDS."""
    seconds = min(cfg.seconds, MAX_SECONDS)
    port, rng = _free_port(), random.Random(cfg.seed)
    users = [f"load-user-{i}" for i in range(cfg.users)]
    server = _start_server(home, port, cfg.lexical)
    base_url = f"http://127.0.0.1:{port}"
    logs = [_Log() for _ in range(cfg.threads)]
    try:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            _wait_healthy(client, server)
            seeded = _seed_users(client, users, rng)
            started = time.monotonic()
            threads = [threading.Thread(target=_client_loop, args=(base_url, cfg, users, i, started + seconds, logs[i]))
                       for i in range(cfg.threads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=seconds + 60)  # a request in flight at the deadline may take its 30 s timeout
            elapsed = time.monotonic() - started
            expected = {u: set(seeded[u]) | {i for log in logs for i in log.acknowledged.get(u, [])} for u in users}
            lost_api = _lost_via_api(client, expected)
    finally:
        server.terminate()
        server.wait(timeout=60)
    lost_store, stored_turns = _count_via_store(home, expected)
    latencies = {op: [x for log in logs for x in log.latencies[op]] for op in ("search", "ingest")}
    errors = [e for log in logs for e in log.errors]
    requests = sum(log.sent for log in logs)
    return LoadResult(
        requests=requests, errors=len(errors), lost_messages=max(lost_api, lost_store),
        acknowledged_messages=sum(len(v) for v in expected.values()), stored_turns=stored_turns,
        seconds=round(elapsed, 2),
        throughput_rps=round(requests / elapsed, 1) if elapsed else 0.0,
        latency_ms={**{op: _percentiles(v) for op, v in latencies.items()},
                    "all": _percentiles(latencies["search"] + latencies["ingest"])},
        first_errors=tuple(errors[:5]),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8, help="client threads (default 8)")
    parser.add_argument("--seconds", type=float, default=30.0, help=f"load duration, at most {MAX_SECONDS:.0f} s")
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--search-share", type=float, default=0.8, help="share of searches (the rest ingest)")
    parser.add_argument("--seed", type=int, default=20240501)
    parser.add_argument("--lexical", action="store_true", help="serve without the embedding model")
    parser.add_argument("--home", type=Path, help="data directory (default: a fresh temporary one)")
    args = parser.parse_args(argv)
    cfg = LoadConfig(threads=args.threads, seconds=args.seconds, users=args.users, search_share=args.search_share,
                     seed=args.seed, lexical=args.lexical)
    with tempfile.TemporaryDirectory(prefix="convsearch-load-") as scratch:
        result = run(cfg, args.home or Path(scratch) / "home")
    print(json.dumps({"config": {k: getattr(cfg, k) for k in cfg.__slots__}, "result": {
        k: getattr(result, k) for k in result.__slots__}}, indent=1))
    return 0 if result.errors == 0 and result.lost_messages == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
