"""`convsearch doctor`: check the store and every user's index shard, and repair what is derived.

Messages are the source of truth; shards, staging directories, old versions, day and conversation
bounds and summaries are derived from them. So every index problem has one repair (clean the
leftovers, rebuild the user's shard with `reindex`), and the store problems that are derived
(bounds, summary spans) are recomputed from the messages. What is not derived (the order of
messages, the schema) is only reported, with what to do.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.store.checks import SCHEMA_VERSION
from engine.errors import ConvsearchError, IndexStateError
from engine.timeutil import utcnow
from indexers.checksums import changed_files
from indexers.shard import Shard, current_version_dir, shard_dir

if TYPE_CHECKING:
    from engine.api import ConversationEngine

__all__ = ["Finding", "DoctorReport", "RepairReport", "diagnose", "repair", "STORE_CODES", "INDEX_CODES"]

# Stable codes (clients and tests match on them); each maps to the fix it is repaired by.
STORE_CODES = ("store_unreadable", "store_schema", "store_seq_order", "store_thread_tail", "store_orphan_turn",
               "store_day_bounds", "store_conversation_bounds", "store_summary_span")
INDEX_CODES = ("index_pointer", "index_unreadable", "index_corrupt", "index_incompatible", "index_ahead",
               "index_manifest_mismatch", "index_bm25_mismatch", "index_vectors_mismatch",
               "index_deleted_reference", "index_leftovers", "index_orphan")
_NOT_REPAIRABLE = frozenset({"store_unreadable", "store_schema", "store_seq_order", "store_orphan_turn"})
_RESTORE = "restore the store from a backup, or export the thread (`convsearch export`) and import it into a fresh home"
_REPAIR = "convsearch doctor --repair"


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    user_id: str | None
    detail: str
    fix: str  # the command (or action) that fixes it
    target: str | None = None  # what repair acts on: a thread id, a summary id or a directory name

    @property
    def repairable(self) -> bool:
        return self.code not in _NOT_REPAIRABLE


@dataclass(frozen=True, slots=True)
class DoctorReport:
    findings: tuple[Finding, ...]
    users_checked: int
    threads_checked: int
    shards_checked: int

    @property
    def ok(self) -> bool:
        return not self.findings

    def codes(self) -> set[str]:
        return {f.code for f in self.findings}


@dataclass(frozen=True, slots=True)
class RepairReport:
    reindexed: tuple[str, ...]
    removed: tuple[str, ...]  # leftover paths deleted
    threads_refreshed: tuple[str, ...]
    summaries_dropped: tuple[str, ...]
    remaining: DoctorReport


# Diagnose ----------------------------------------------------------------------------------------
def diagnose(engine: ConversationEngine) -> DoctorReport:
    """Every finding about the store and the shards on disk (the live in-memory shards are not read)."""
    with engine.write_lock:  # a save or an ingest halfway through would look like a problem
        try:
            findings = _store_findings(engine)
            users = [u.user_id for u in engine.store.list_users()]
        except Exception as exc:  # noqa: BLE001 - a damaged store file fails in DuckDB's own words; say what to do
            detail = f"the store file cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
            return DoctorReport((Finding("store_unreadable", None, detail, _RESTORE),), 0, 0, 0)
        shards = 0
        for user_id in users:
            found, loaded = _index_findings(engine, user_id)
            findings += found
            shards += loaded
        findings += _orphan_shards(engine.pipeline.root, users)
        threads = engine.store.checks.thread_count()
    return DoctorReport(tuple(findings), len(users), threads, shards)


def _store_findings(engine: ConversationEngine) -> list[Finding]:
    checks = engine.store.checks
    found: list[Finding] = []
    version = checks.schema_version()
    if version != SCHEMA_VERSION:
        found.append(Finding("store_schema", None,
                             f"schema version {version}, this convsearch expects {SCHEMA_VERSION}",
                             "upgrade convsearch (or open the store with the version that wrote it)"))
    for code, what, fix in _STORE_CHECKS:
        for user_id, thread_id, subject in checks.problems(code):
            target = subject.split(" ", 1)[1] if code == "store_summary_span" else thread_id
            found.append(Finding(code, user_id, f"thread {thread_id!r}: {what} ({subject})", fix, target))
    return found


# What each of the store's checks (engine/store/checks.py) finds, and its fix; a summary's subject
# is 'summary <id>'.
_STORE_CHECKS: tuple[tuple[str, str, str], ...] = (
    ("store_seq_order", "seq is not strictly increasing in time order", _RESTORE),
    ("store_thread_tail", "the thread's highest seq given is below a stored seq (a new message would reuse it)",
     _REPAIR),
    ("store_orphan_turn", "a turn belongs to no stored conversation", _RESTORE),
    ("store_day_bounds", "a day segment does not cover its messages", _REPAIR),
    ("store_conversation_bounds", "a conversation's bounds do not hold its turns", _REPAIR),
    ("store_summary_span", "a summary's span lies outside its thread", _REPAIR),
)


def _index_findings(engine: ConversationEngine, user_id: str) -> tuple[list[Finding], int]:
    """Findings about one user's shard directory; (findings, 1 when a version was loaded)."""
    root = engine.pipeline.root
    base = shard_dir(root, user_id)
    if not base.exists():
        return [], 0  # never saved: the shard is built from the store on first use
    found = _leftover_findings(base, user_id)
    pointer = _pointer_problem(base)
    if pointer is not None:
        return found + [Finding("index_pointer", user_id, pointer, _reindex_fix(user_id))], 0
    if not (base / "CURRENT").exists():
        return found, 0
    try:
        shard = Shard.load(root, user_id, engine.pipeline.tokenizer, with_vectors=True)
    except Exception as exc:  # noqa: BLE001 - the doctor reports any broken file, whatever its parser raises
        detail = exc.message if isinstance(exc, ConvsearchError) else f"{type(exc).__name__}: {exc}"
        return found + [Finding("index_unreadable", user_id, detail, _reindex_fix(user_id))], 0
    assert shard is not None  # CURRENT exists and names a directory (checked above)
    try:
        problems = _shard_findings(engine, user_id, shard)
    except IndexStateError as exc:  # a damaged file the load did not read (the windows' text is read lazily)
        return found + [Finding("index_unreadable", user_id, exc.message, _reindex_fix(user_id))], 0
    return found + problems + _changed_bytes(root, user_id), 1


def _changed_bytes(root: Path, user_id: str) -> list[Finding]:
    """Files that differ from their checksums: bytes flipped inside vectors or postings, which may
    load and add up. Checked beside any other finding, since the repair deletes the directory only
    for this one: a warm reindex would take the saved graph and vectors back."""
    version = current_version_dir(root, user_id)
    changed = changed_files(version) if version is not None else []
    if not changed:
        return []
    detail = f"{len(changed)} file(s) changed on disk since the save: {'; '.join(changed[:3])}"
    return [Finding("index_corrupt", user_id, detail, _REPAIR)]


def _pointer_problem(base: Path) -> str | None:
    pointer = base / "CURRENT"
    if not pointer.exists():
        versions = [p.name for p in base.iterdir() if p.is_dir() and p.name.startswith("v")]
        return f"no CURRENT pointer but versions {sorted(versions)}" if versions else None
    name = pointer.read_text(encoding="utf-8", errors="replace").strip()
    if not _is_version(name):
        return f"CURRENT holds {name[:40]!r}, not a version name"
    if not (base / name).is_dir():
        return f"CURRENT points to a missing version {name}"
    return None


def _is_version(name: str) -> bool:
    """What Shard.save names a version: v and six digits (never a path)."""
    return len(name) == 7 and name.startswith("v") and name[1:].isdigit()


def _leftover_findings(base: Path, user_id: str | None) -> list[Finding]:
    stale = _leftovers(base)
    if not stale:
        return []
    names = ", ".join(sorted(p.name for p in stale))
    return [Finding("index_leftovers", user_id, f"{base.name}: stale {names}", _REPAIR)]


def _leftovers(base: Path) -> list[Path]:
    """Staging dirs, temp pointers and versions that CURRENT does not name (crash leftovers)."""
    pointer = base / "CURRENT"
    live = pointer.read_text(encoding="utf-8", errors="replace").strip() if pointer.exists() else None
    if live is not None and not (_is_version(live) and (base / live).is_dir()):
        return []  # a broken pointer: the index_pointer finding covers the whole directory
    return [p for p in base.iterdir() if p.name not in ("CURRENT", live)]


def _shard_findings(engine: ConversationEngine, user_id: str, shard: Shard) -> list[Finding]:
    fix = _reindex_fix(user_id)
    found: list[Finding] = []
    try:
        shard.manifest.check_compatible(engine.pipeline.spec(), lexical_only=engine.pipeline.embedder is None)
    except ConvsearchError as exc:
        found.append(Finding("index_incompatible", user_id, exc.message, fix))
    for detail in _watermark_problems(engine, user_id, shard):
        found.append(Finding("index_ahead", user_id, detail, fix))
    for detail in _manifest_problems(shard):
        found.append(Finding("index_manifest_mismatch", user_id, detail, fix))
    labels = set(shard.chunks)
    if len(shard.bm25) != len(labels) or any(label not in shard.bm25 for label in labels):
        found.append(Finding("index_bm25_mismatch", user_id,
                             f"BM25 holds {len(shard.bm25)} windows, the chunk table {len(labels)}", fix))
    if shard.hnsw is not None:
        stored = set(shard.hnsw.labels().tolist())
        missing, extra = set(shard.has_vector) - stored, stored - labels
        if missing or extra:
            found.append(Finding("index_vectors_mismatch", user_id,
                                 f"{len(missing)} windows flagged with a vector have none; {len(extra)} vectors "
                                 "belong to no window", fix))
    gone = _missing_messages(engine, user_id, shard)
    if gone:
        found.append(Finding("index_deleted_reference", user_id,
                             f"{len(gone)} indexed messages are not in the store, e.g. {sorted(gone)[0]!r}", fix))
    return found


def _watermark_problems(engine: ConversationEngine, user_id: str, shard: Shard) -> list[str]:
    own = {t.thread_id for t in engine.store.threads_of(user_id)}
    problems = []
    for thread_id, watermark in shard.manifest.watermarks.items():
        tail = engine.store.thread_tail(thread_id)[0] if thread_id in own else 0
        if watermark > tail:
            problems.append(f"thread {thread_id!r}: indexed up to seq {watermark}, the store ends at {tail}")
    return problems


def _manifest_problems(shard: Shard) -> list[str]:
    """The manifest must describe the chunks saved beside it (a mix of two saves would not)."""
    manifest, problems = shard.manifest, []
    if manifest.chunks != len(shard.chunks):
        problems.append(f"manifest counts {manifest.chunks} windows, the chunk table holds {len(shard.chunks)}")
    if shard.chunks and manifest.next_label <= max(shard.chunks):
        problems.append(f"next label {manifest.next_label} is not above the largest label {max(shard.chunks)}")
    for chunk in shard.chunks.values():
        if chunk.to_seq > manifest.watermarks.get(chunk.thread_id, 0):
            problems.append(f"a window of {chunk.thread_id!r} ends at seq {chunk.to_seq}, past the watermark")
            break
    return problems


def _missing_messages(engine: ConversationEngine, user_id: str, shard: Shard) -> set[str]:
    referenced = sorted({m for c in shard.chunks.values() for m in c.message_ids})
    return engine.store.checks.missing_messages(user_id, referenced)


def _orphan_shards(root: Path, users: list[str]) -> list[Finding]:
    """Shard directories of no stored user (e.g. a delete_user interrupted after its transaction)."""
    if not root.is_dir():
        return []
    owned = {shard_dir(root, u).name for u in users}
    return [Finding("index_orphan", None, f"{p.name} belongs to no user", _REPAIR, p.name)
            for p in sorted(root.iterdir()) if p.name not in owned and _looks_like_shard(p)]


def _looks_like_shard(path: Path) -> bool:
    """A directory named as shard_dir names them (<slug>-<10 hex>) holding a pointer or versions:
    anything else under the index root is not the doctor's to delete."""
    name, _, digest = path.name.rpartition("-")
    if not (path.is_dir() and name and len(digest) == 10 and all(c in "0123456789abcdef" for c in digest)):
        return False
    return (path / "CURRENT").exists() or any(_is_version(p.name) for p in path.iterdir())


def _reindex_fix(user_id: str) -> str:
    return f"convsearch reindex --user {user_id} (or {_REPAIR})"


# Repair ------------------------------------------------------------------------------------------
def repair(engine: ConversationEngine, report: DoctorReport | None = None) -> RepairReport:
    """Fix every repairable finding of `report` (diagnosed now when omitted), then diagnose again."""
    report = report or diagnose(engine)
    with engine.write_lock:
        threads, dropped = _repair_store(engine, report)
        removed = _repair_dirs(engine, report)
        users = sorted({f.user_id for f in report.findings
                        if f.user_id and f.code.startswith("index_") and f.code != "index_leftovers"})
        for user_id in users:
            engine.reindex(user_id)
    return RepairReport(tuple(users), tuple(removed), tuple(threads), tuple(dropped), diagnose(engine))


def _repair_store(engine: ConversationEngine, report: DoctorReport) -> tuple[list[str], list[str]]:
    """Recompute the derived records of affected threads; drop summaries outside their thread."""
    bounds = ("store_day_bounds", "store_conversation_bounds", "store_thread_tail")
    threads = sorted({f.target for f in report.findings if f.code in bounds and f.target})
    dropped = sorted({f.target for f in report.findings if f.code == "store_summary_span" and f.target})
    with engine.store.transaction():
        for thread_id in threads:
            _refresh_thread(engine, thread_id)
        if dropped:
            engine.store.timeline.delete_summaries(dropped)  # their users' summary indexes rebuild on next use
    return threads, dropped


def _refresh_thread(engine: ConversationEngine, thread_id: str) -> None:
    """Day segments, conversation bounds and the highest seq given, from the thread's messages."""
    timeline = engine.store.timeline
    days = engine.store.checks.day_spans(thread_id)
    for user_id, day, lo, hi in days:
        timeline.touch_day(user_id, thread_id, day, lo, hi, utcnow())  # creates a missing segment
    timeline.refresh_day_bounds(thread_id)
    timeline.refresh_conversation_bounds(thread_id)
    engine.store.advance_thread(thread_id, max((hi for *_, hi in days), default=0))


def _repair_dirs(engine: ConversationEngine, report: DoctorReport) -> list[str]:
    """Delete crash leftovers, orphan shards, and the whole directory of a shard that cannot load
    (it is derived: reindex writes it again from the store)."""
    root = engine.pipeline.root
    doomed: list[Path] = []
    for finding in report.findings:
        if finding.code == "index_orphan" and finding.target:
            doomed.append(root / finding.target)
        elif finding.code in ("index_pointer", "index_unreadable", "index_corrupt") and finding.user_id:
            doomed.append(shard_dir(root, finding.user_id))
        elif finding.code == "index_leftovers" and finding.user_id:
            doomed += _leftovers(shard_dir(root, finding.user_id))
    removed = []
    for path in dict.fromkeys(doomed):
        if path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            removed.append(str(path))
    return removed
