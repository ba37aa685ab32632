"""Operations commands: `convsearch doctor [--repair]` and `convsearch delete`.

Both open the engine WITH its embedder: a deletion must forget cached vectors and rewrite the
vector index, and the doctor checks shards against the configured model.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine.surfaces.cli.common import open_engine, open_local
from engine.surfaces.cli.output import emit
from engine.errors import ConvsearchError

__all__ = ["register", "doctor", "delete"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check the store and every index; --repair fixes what is derived",
                       description="Check the store and every user's index; exits 2 when problems remain.")
    p.add_argument("--repair", action="store_true", help="rebuild broken indexes and clean crash leftovers")
    p.set_defaults(handler=doctor)

    p = sub.add_parser("delete", help="delete messages, a conversation or a user everywhere (store, indexes, cache)")
    p.add_argument("--user", required=True, help="the user whose data to delete")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--message", nargs="+", metavar="ID", help="message ids (another user's ids are ignored)")
    which.add_argument("--conversation", metavar="ID", help="a conversation id")
    which.add_argument("--all-of-user", action="store_true", help="the user and everything derived from it")
    p.add_argument("--yes", action="store_true", help="delete a user without asking first")
    p.set_defaults(handler=delete)


def doctor(args: argparse.Namespace) -> dict[str, Any] | None:
    """Print the report (and what was repaired); problems left over exit 2 with one line on stderr."""
    with open_local(args, "doctor" + (" --repair" if args.repair else "")) as engine:
        report = engine.diagnose()
        if not args.repair:
            result: dict[str, Any] = {"ok": report.ok, "report": report}
            remaining = report
        else:
            repaired = engine.repair(report)
            remaining = repaired.remaining
            result = {"ok": remaining.ok, "before": report, "repaired": repaired}
    if remaining.ok:
        return result
    emit(result, args.format)  # the report still goes to stdout; the exit code says it is not clean
    sys.stdout.flush()
    codes = ", ".join(sorted(remaining.codes()))
    hint = "; each finding's fix says what to do"
    hint += "" if args.repair else " (`convsearch doctor --repair` applies those it can)"
    raise ConvsearchError(f"doctor found {len(remaining.findings)} problem(s) ({codes}){hint}")


def delete(args: argparse.Namespace) -> dict[str, Any]:
    with open_engine(args) as engine:
        if args.all_of_user:
            _confirm_user_deletion(engine, args.user, args.yes)
        return engine.delete(args.user, message_ids=args.message, conversation_id=args.conversation,
                             all_of_user=args.all_of_user)


def _confirm_user_deletion(engine: Any, user_id: str, yes: bool) -> None:
    """Deleting a user cannot be undone: ask on a terminal, require --yes elsewhere."""
    messages = engine.stats(user_id)["messages"]  # also: an unknown user is an error before any question
    if yes:
        return
    if not sys.stdin.isatty():
        raise ConvsearchError(f"deleting user {user_id!r} ({messages} messages) cannot be undone: pass --yes to "
                              "confirm (no terminal to ask on)")
    answer = input(f"Delete user {user_id!r} and all {messages} of their messages, summaries and indexes? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise ConvsearchError(f"not deleted: user {user_id!r} is unchanged")
