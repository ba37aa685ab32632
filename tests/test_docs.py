"""The reference docs cover every CLI command and option, HTTP route and body field, MCP tool and argument."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine.api import ConversationEngine
from engine.surfaces.cli import build_parser
from engine.surfaces.http.app import create_app
from engine.surfaces.mcp.server import build_server

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reference"


def sections(name: str) -> dict[str, str]:
    """Heading line -> the text under it, for every `###` section of a reference page."""
    parts = re.split(r"^### (.+)$", (DOCS / name).read_text(encoding="utf-8"), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def section(pages: dict[str, str], key: str) -> str:
    found = [heading + body for heading, body in pages.items() if key in heading]
    assert len(found) == 1, f"no single section headed {key!r}"
    return found[0]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with ConversationEngine(tmp_path_factory.mktemp("docs") / "home", embedder=None) as e:
        yield e


def _commands(parser: argparse.ArgumentParser | None = None, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command, nested ones too ("eval locomo"), by its full name."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in (parser or build_parser())._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found[prefix + name] = child
                found |= _commands(child, f"{prefix}{name} ")
    return found


def _command_of(heading: str) -> str:
    """The command words of a heading: "eval locomo" for `convsearch eval locomo --data FILE`."""
    words: list[str] = []
    for word in heading.strip("` ").split()[1:]:
        if not word.isidentifier() or word.isupper():
            break
        words.append(word)
    return " ".join(words)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_cli_command_and_option_is_documented(name: str) -> None:
    found = [h + body for h, body in sections("cli.md").items() if _command_of(h) == name]
    assert len(found) == 1, f"no single section for convsearch {name}"
    text = found[0]
    options = [o for a in _commands()[name]._actions for o in a.option_strings
               if o.startswith("--") and o != "--help" and a.default is not argparse.SUPPRESS]  # not the global copies
    assert [o for o in options if o not in text] == [], f"convsearch {name}: undocumented options"


def test_every_http_route_and_body_field_is_documented(engine: ConversationEngine) -> None:
    document = create_app(engine).openapi()
    pages = sections("http.md")
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            text = section(pages, f"`{method.upper()} {path}`")
            ref = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            schema = document["components"]["schemas"].get(ref.get("$ref", "").rsplit("/", 1)[-1], {})
            missing = [field for field in schema.get("properties", {}) if f"`{field}`" not in text]
            assert missing == [], f"{method.upper()} {path}: undocumented body fields"


def test_every_mcp_tool_and_argument_is_documented(engine: ConversationEngine) -> None:
    tools = anyio.run(build_server(engine, "alice").list_tools)
    pages = sections("mcp.md")
    assert len(pages) == len(tools)
    for tool in tools:
        text = section(pages, f"`{tool.name}`")
        missing = [arg for arg in tool.input_schema["properties"] if f"`{arg}`" not in text]
        assert missing == [], f"{tool.name}: undocumented arguments"
