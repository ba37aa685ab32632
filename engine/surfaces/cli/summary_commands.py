"""`convsearch summarize`: a range on request, or the summary policy over stored history (backfill,
the scheduled close for cron, regenerating a day)."""

from __future__ import annotations

import argparse

from engine.surfaces.cli.common import open_engine
from engine.errors import InvalidInputError

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("summarize", help="summarise turns START <= seq < END, or fill in day and conversation "
                                         "summaries by the summary policy")
    p.add_argument("range", nargs="*", type=int, metavar="START END",
                   help="with --user: summarise turns START <= seq < END (stored and searchable)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="only this user")
    who.add_argument("--all", action="store_true", help="every user")
    p.add_argument("--since", metavar="DAY", help="only days (and conversations ending) on or after YYYY-MM-DD")
    p.add_argument("--finalize", action="store_true",
                   help="only the scheduled close (for cron): end idle conversations, close days that are over")
    p.add_argument("--regenerate", metavar="DAY", help="rewrite the day's summary now (YYYY-MM-DD; with --user)")
    p.add_argument("--thread", help="thread of the range or of the day to regenerate (default: the user's continuous "
                                    "thread)")
    p.set_defaults(handler=summarize)


def summarize(args: argparse.Namespace) -> object:
    if args.range:
        return _range(args)
    if args.regenerate and not args.user:
        raise InvalidInputError("--regenerate DAY needs --user U: a day belongs to one user's thread")
    if args.regenerate and (args.finalize or args.since):
        raise InvalidInputError("--regenerate rewrites one day: give it without --finalize or --since")
    if args.thread and not args.regenerate:
        raise InvalidInputError("--thread only goes with a range (START END) or --regenerate DAY")
    if args.finalize and args.since:
        raise InvalidInputError("--finalize closes each thread's last day: give it without --since")
    with open_engine(args, vectors=False) as engine:
        if args.regenerate:
            return engine.regenerate_day_summary(args.user, args.regenerate, thread_id=args.thread)
        if args.finalize:
            return engine.finalize_days(args.user)
        return engine.summarize(args.user, since=args.since)


def _range(args: argparse.Namespace) -> object:
    if len(args.range) != 2 or not args.user or args.since or args.finalize or args.regenerate:
        raise InvalidInputError("a range is summarised as: convsearch summarize --user U START END [--thread T] (two "
                                "seqs, END exclusive), without --all, --since, --finalize or --regenerate")
    with open_engine(args, vectors=False) as engine:
        return engine.summarize_range(args.user, args.range[0], args.range[1], thread_id=args.thread)
