"""`convsearch`: every operation of the engine from the command line.

Commands live in topic modules, each with `register(subparsers)`; handlers take the engine and
the parsed arguments and return a JSON-able result, which `main` prints. Errors of the engine's
hierarchy print one clear line on stderr, `convsearch: error [code]: message`, and exit with their
class's exit code (docs/reference/cli.md; 1 for anything unexpected)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Sequence

from engine.cli.output import emit
from engine.errors import ConvsearchError

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    from engine.cli import data_commands, eval_commands, ops_commands, query_commands, service_commands

    parser = argparse.ArgumentParser(prog="convsearch", description=__doc__.splitlines()[0].strip("`: "))
    parser.add_argument("--home", help="data directory (default: $CONVSEARCH_HOME or ./.convsearch)")
    parser.add_argument("--format", choices=("json", "table"), default="json", help="output format (default json)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log engine events to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (data_commands, query_commands, service_commands, eval_commands, ops_commands):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s %(message)s")
    try:
        result = args.handler(args)
    except ConvsearchError as exc:
        print(f"convsearch: error [{exc.code}]: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("convsearch: interrupted", file=sys.stderr)
        return 130
    if result is not None:
        emit(result, args.format)
    return 0


if __name__ == "__main__":
    sys.exit(main())
