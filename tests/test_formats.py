"""docs/formats.md: every import format has an example file under data/examples/, and each imports
through the CLI as the page says (twice: the second time stores nothing new)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.surfaces.cli import main
from engine.importers import FORMATS

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "data" / "examples"
PAGE = (REPO / "docs" / "formats.md").read_text(encoding="utf-8")
COMMANDS = re.findall(r"`convsearch ingest (data/examples/\S+)((?: --\S+ \S+)*)`", PAGE)


def test_every_format_has_a_section_an_example_and_a_command() -> None:
    sections = re.findall(r"^## `(\w+)`", PAGE, flags=re.MULTILINE)
    assert sorted(sections) == sorted(FORMATS)
    files = {path for path, _ in COMMANDS}
    assert len(COMMANDS) == len(FORMATS) and all((REPO / f).is_file() for f in files)
    assert {p.name for p in EXAMPLES.iterdir()} == {Path(f).name for f in files}


@pytest.mark.parametrize(("path", "options"), COMMANDS, ids=[Path(p).name for p, _ in COMMANDS])
def test_each_example_imports_as_documented(tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str,
                                            options: str) -> None:
    argv = ["--home", str(tmp_path / "home"), "ingest", str(REPO / path), *options.split()]
    assert main(argv) == 0, capsys.readouterr().err
    first = json.loads(capsys.readouterr().out)["import"]
    assert first["inserted"] >= 2 and first["skipped"] == [] and first["users"]
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)["import"]
    assert again["inserted"] == 0 and again["duplicates"] == first["inserted"]
