"""Data commands: ingest, export, users, stats, index, reindex, demo."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from engine.surfaces.cli.common import open_engine, open_local, progress_bar
from engine.errors import InvalidInputError
from engine.importers import FORMATS, guess_format
from engine.surfaces.serialize import to_jsonable

__all__ = ["register"]

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample.jsonl"
DEMO_QUERIES = (("alice", "what did we decide about the database?"), ("alice", "order A-7731"),
                ("alice", "ECONNRESET"), ("bob", "Mochi"), ("bob", "京都"))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest", help="import a file of messages into the store")
    p.add_argument("file", type=Path)
    p.add_argument("--format", dest="file_format", choices=FORMATS,
                   help="the file's format (default: from its extension: .jsonl, .parquet, or .json by its first record)")
    p.add_argument("--user", help="user id for formats without one (openai, legacy) or as the JSONL default")
    p.add_argument("--timezone", help="IANA time zone for users created by this import")
    p.add_argument("--skip-bad", action="store_true", help="skip bad records (each is reported) instead of failing")
    p.add_argument("--index", action="store_true", help="index the imported users afterwards")
    p.add_argument("--update", action="store_true",
                   help="a record whose id is stored with other text replaces that text (and re-indexes it)")
    p.set_defaults(handler=ingest)

    p = sub.add_parser("export", help="export a user's thread to Parquet, JSONL or CSV (by the file's extension)")
    p.add_argument("--user", required=True)
    p.add_argument("--thread", help="thread id (default: the user's continuous thread)")
    p.add_argument("--out", type=Path, required=True, help="the .parquet, .jsonl or .csv file to write")
    p.set_defaults(handler=export)

    p = sub.add_parser("users", help="list the users of the data directory, with their time zones")
    p.set_defaults(handler=users)

    p = sub.add_parser("stats", help="counts of users, threads, messages, conversations, day segments, summaries")
    p.add_argument("--user", help="only this user")
    p.set_defaults(handler=stats)

    for name, what in (("index", "incremental: index messages not indexed yet"),
                       ("reindex", "rebuild indexes from the store and swap them in")):
        p = sub.add_parser(name, help=what)
        group = p.add_mutually_exclusive_group(required=name == "reindex")
        group.add_argument("--user", help="only this user")
        group.add_argument("--all", action="store_true", help="every user")
        p.set_defaults(handler=index if name == "index" else reindex)
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: in this process; ray: on a Ray cluster (the ray extra: pip install -e '.[ray]')")
    p.add_argument("--ray-address", help="the Ray cluster to join (default: start a local instance)")
    p.add_argument("--embed-actors", type=int, help="embedding actors, each loading the model once (default: CPUs - 1)")
    p.add_argument("--shards", help="publish shards to this directory or s3:// URL instead of --home's indexes/")

    p = sub.add_parser("demo", help="ingest the sample in data/, index it, and run a few searches")
    p.set_defaults(handler=demo)


def ingest(args: argparse.Namespace) -> dict:
    fmt = args.file_format or guess_format(args.file)
    # replacing a text rewrites its windows' vectors: the model is needed then, as for --index
    with open_engine(args, vectors=args.index or args.update, create=True) as engine:
        report = engine.import_file(args.file, fmt=fmt, user_id=args.user, timezone=args.timezone,
                                    skip_bad=args.skip_bad, progress=True, update=args.update)
        summary = to_jsonable(report)  # a record here, JSON from a server
        changed = summary.get("changed") or []
        if changed:
            print(f"convsearch: {len(changed)} record(s) differ from a message with the same id (first: "
                  f"{changed[0]['location']}: {changed[0]['reason']}; see \"changed\")", file=sys.stderr)
        imported = summary["users"] if args.index else []
        indexed = [r for u in imported for r in engine.index(u, progress=progress_bar(f"index {u}"))]
        return {"import": report, "index": indexed}


def export(args: argparse.Namespace) -> dict:
    with open_local(args, "export", vectors=False) as engine:
        rows = engine.export(args.user, args.out, thread_id=args.thread)
        return {"path": str(args.out), "format": args.out.suffix.lower().lstrip("."), "rows": rows}


def users(args: argparse.Namespace) -> list:
    with open_engine(args, vectors=False) as engine:
        return list(engine.iter_users())


def stats(args: argparse.Namespace) -> dict:
    with open_engine(args, vectors=False) as engine:
        return engine.stats(args.user)


def index(args: argparse.Namespace) -> list:
    with open_engine(args) as engine:
        return engine.index(args.user, progress=progress_bar("index"))


def reindex(args: argparse.Namespace) -> list | object:
    ray_only = [f"--{name.replace('_', '-')}" for name in ("ray_address", "embed_actors", "shards")
                if getattr(args, name) is not None]
    if args.executor == "local" and ray_only:
        raise InvalidInputError(f"{', '.join(ray_only)} only apply with --executor ray")
    if args.executor == "ray":  # the job's driver reads the store itself: not beside a running server
        with open_local(args, "reindex --executor ray") as local:
            return local.reindex_on_ray(args.user, address=args.ray_address, embed_actors=args.embed_actors,
                                        shards=args.shards, progress=progress_bar("reindex"))
    with open_engine(args) as engine:
        return engine.reindex(args.user, progress=progress_bar("reindex"))


def demo(args: argparse.Namespace) -> dict:
    """The main job on the embedded default: ingest the sample, index it, search it."""
    started = time.perf_counter()
    with open_local(args, "demo", create=True) as engine:
        report = engine.import_file(SAMPLE, fmt="jsonl", progress=True)
        indexed = engine.index(progress=progress_bar("index"))
        searches = []
        for user, query in DEMO_QUERIES:
            response = engine.search(user, query, limit=3)
            searches.append({"user": user, "query": query, "mode": response.mode, "took_ms": response.took_ms,
                             "results": [{"kind": h.kind, "score": h.score, "day": h.day_label,
                                          "message_id": h.message_id or h.summary_id, "snippet": h.snippet}
                                         for h in response.results]})
        return {"ingested": report.inserted, "indexed": indexed, "searches": searches,
                "stats": engine.stats(), "seconds": round(time.perf_counter() - started, 2)}
