"""Ingest, import, index and reindex report their rates: seconds per phase, messages/s, windows/s,
in the facade's records and in the CLI's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.surfaces.cli import main
from tests.support import batch, open_engine


def _consistent(record: object, count: int, rate_name: str, phases: set[str]) -> None:
    seconds, rate, parts = record.seconds, getattr(record, rate_name), record.phases_s
    assert seconds > 0 and set(parts) == phases, parts
    assert sum(parts.values()) <= seconds + 1e-3  # phases are parts of the whole
    assert rate == pytest.approx(count / seconds, rel=0.01, abs=0.1)


def test_ingest_index_and_reindex_report_their_rates(tmp_path: Path) -> None:
    with open_engine(tmp_path / "home") as engine:
        engine.add_user("u", "UTC")
        stored = engine.ingest("u", batch(0, 300), index=False)
        _consistent(stored, 300, "messages_per_s", {"store", "summaries", "lexical"})
        embedded = engine.ingest("u", batch(1, 20))
        _consistent(embedded, 20, "messages_per_s", {"store", "summaries", "lexical", "embed"})
        indexed = engine.index("u")[0]
        _consistent(indexed, indexed.chunks_added, "windows_per_s", {"chunk", "vectors", "save"})
        rebuilt = engine.reindex("u")[0]
        windows = len(engine.pipeline.shard("u").chunks)
        _consistent(rebuilt, windows, "windows_per_s", {"chunk", "vectors", "save", "catch_up"})
        assert rebuilt.messages_per_s == pytest.approx(rebuilt.messages / rebuilt.seconds, rel=0.01, abs=0.1)
        assert rebuilt.messages >= 320 and windows > 0


def test_cli_ingest_json_reports_the_import_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in batch(0, 200)), encoding="utf-8")
    assert main(["--home", str(tmp_path / "home"), "ingest", str(source), "--user", "u", "--timezone", "UTC"]) == 0
    report = json.loads(capsys.readouterr().out)["import"]
    assert report["inserted"] == 200 and set(report["phases_s"]) == {"store", "rewrite", "summaries", "lexical"}
    assert report["messages_per_s"] == pytest.approx(200 / report["seconds"], rel=0.01, abs=0.1)
