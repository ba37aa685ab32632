"""`convsearch`: every operation of the engine from the command line.

Commands live in topic modules, each with `register(subparsers)`; handlers take the engine and
the parsed arguments and return a JSON-able result, which `main` prints. Errors of the engine's
hierarchy print one clear line on stderr, `convsearch: error [code]: message`, and exit with their
class's exit code (docs/reference/cli.md; 1 for anything unexpected)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator, Sequence

from engine.surfaces.cli.output import emit
from engine.errors import ConvsearchError

__all__ = ["main", "build_parser"]

LOG_FORMAT = "%(levelname)s %(name)s %(message)s"


def build_parser() -> argparse.ArgumentParser:
    from engine.surfaces.cli import (data_commands, eval_commands, ops_commands, query_commands, service_commands,
                            summary_commands)

    summary = __doc__.splitlines()[0].replace("`", "").removeprefix("convsearch: ")  # "every operation of ..."
    parser = argparse.ArgumentParser(prog="convsearch", description=summary[:1].upper() + summary[1:])
    parser.add_argument("--version", action="version", version=f"convsearch {_version()}")
    _global_options(parser, None)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (data_commands, query_commands, service_commands, eval_commands, ops_commands, summary_commands):
        module.register(sub)
    for command in _leaves(parser):
        _global_options(command, argparse.SUPPRESS)
    return parser


def _global_options(parser: argparse.ArgumentParser, default: object) -> None:
    """--home, --format and -v: on the main parser with their defaults, and again on every command with
    SUPPRESS, so `convsearch search ... --format table` works and leaves the main value alone when absent.
    A command's own option of the same name wins (`ingest --format` is the file's format)."""
    taken = {flag for action in parser._actions for flag in action.option_strings}
    suppress = default is argparse.SUPPRESS
    options = (
        (("--home",), {"help": "data directory (default: $CONVSEARCH_HOME or ./.convsearch)"}),
        (("--format",), {"choices": ("json", "table"), "default": "json", "help": "output format (default json)"}),
        (("-v", "--verbose"), {"action": "store_true", "help": "log what each step does to stderr"}),
    )
    for flags, spec in options:
        if taken & set(flags):
            continue
        parser.add_argument(*flags, **({**spec, "default": argparse.SUPPRESS} if suppress else spec))


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += _leaves(child) or [child]
    return found


def _log_to_stderr(verbose: bool) -> None:
    """convsearch's own loggers to this call's stderr: INFO (what each step does) with -v, else warnings."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=LOG_FORMAT)
    ours = logging.getLogger("convsearch")
    for old in [h for h in ours.handlers if getattr(h, "convsearch_cli", False)]:
        ours.removeHandler(old)  # main() may run more than once in a process (tests, embedding)
    handler = logging.StreamHandler(sys.stderr)
    handler.convsearch_cli = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    ours.addHandler(handler)
    ours.setLevel(logging.INFO if verbose else logging.WARNING)
    ours.propagate = False


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("convsearch")
    except PackageNotFoundError:
        return "0.1.0"


@contextmanager
def _noting_interrupts() -> Iterator[list[int]]:
    """Ctrl-C as before (KeyboardInterrupt), also noted: DuckDB turns one that lands inside a query into
    an error of its own ("Query interrupted"), which is still the user's Ctrl-C, not a bug."""
    noted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def note(number: int, frame: object) -> None:
        noted.append(number)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted() -> int:
    print("convsearch: interrupted: what was stored stays; run the same command again to finish (stored ids are "
          "skipped)", file=sys.stderr)
    return 130


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    _log_to_stderr(args.verbose)
    with _noting_interrupts() as interrupted:
        try:
            result = args.handler(args)
        except ConvsearchError as exc:
            print(f"convsearch: error [{exc.code}]: {exc.message}", file=sys.stderr)
            return exc.exit_code
        except Exception:
            if not interrupted:
                raise  # a bug: its traceback
            return _interrupted()
        except KeyboardInterrupt:
            return _interrupted()
    if result is not None:
        emit(result, args.format)
    return 0


if __name__ == "__main__":
    sys.exit(main())
