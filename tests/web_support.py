"""Shared by the web tests: the sample data fed through the live ingest path, and a real `convsearch serve`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from itertools import groupby
from pathlib import Path
from typing import Iterator

import httpx

from engine.api import ConversationEngine
from engine.config import Settings
from tests.support import free_port

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample.jsonl"
OPENAI = ROOT / "data" / "examples" / "openai.json"
TOKEN = "web-test-token"
# Day summaries every 6 turns: the sample's days then have a summary and, on the last day, turns it
# does not cover yet (what the page folds and what it leaves open).
ENV = {"CONVSEARCH_DAY_SUMMARY_EVERY": "6", "CONVSEARCH_API_TOKEN": TOKEN}
CHUNK = 8  # messages per ingest call: the way an agent appends them through the day


def settings() -> Settings:
    return Settings(day_summary_every=6, api_token=TOKEN)


def feed_sample(engine: ConversationEngine) -> None:
    """The sample through `ingest` day by day, a few messages at a time, plus an OpenAI import for alice."""
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    for user, mine in groupby(sorted(rows, key=lambda r: r["user_id"]), key=lambda r: r["user_id"]):
        mine = list(mine)
        engine.add_user(user, mine[0]["timezone"])
        for _, day in groupby(mine, key=lambda r: r["created_at"][:10]):  # local day: times carry the offset
            day = [{k: v for k, v in r.items() if k not in ("user_id", "timezone")} for r in day]
            for start in range(0, len(day), CHUNK):
                engine.ingest(user, day[start:start + CHUNK], index=False)
    engine.import_file(OPENAI, fmt="openai", user_id="alice")
    engine.index("alice")  # bob is left to the server's background step (engine.surfaces.http.background)


def serve(home: Path, log: Path) -> Iterator[str]:
    """`convsearch serve` on a free loopback port in its own process; yields its base URL."""
    port = free_port()
    script = Path(sys.executable).with_name("convsearch")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "engine.surfaces.cli"]
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    with log.open("wb") as out:
        process = subprocess.Popen([*command, "--home", str(home), "serve", "--port", str(port)],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"convsearch serve exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "convsearch serve did not answer /healthz in 60 s"
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
