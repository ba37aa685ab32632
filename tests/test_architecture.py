"""Layer boundaries, checked on the source: `indexers` never reaches the query layer or a surface,
surfaces and benchmarks go through the facade, and only the store runs SQL."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from engine.api import ConversationEngine

ROOT = Path(__file__).resolve().parents[1]
# What indexers may use of the engine: its lowest layer (errors, records, settings, the store, and
# the process-level helpers that import nothing of the engine: worker processes, the collector).
ALLOWED_FOR_INDEXERS = ("engine.errors", "engine.models", "engine.config", "engine.timeutil", "engine.store",
                        "engine.subprocesses", "engine.collector")
SURFACES = "engine.surfaces"
# What a surface (and a benchmark) may import of the engine: the facade, the vocabulary every layer
# shares, and the record modules whose frozen dataclasses the facade returns. Not the store, the
# query or summary machinery, maintenance, or the indexes: those are reached through engine.api.
THROUGH_THE_FACADE = ("engine.api", "engine.config", "engine.errors", "engine.models", "engine.timeutil",
                      "engine.text_rules", "engine.validation", "engine.query.search_types",
                      "engine.query.navigation_results")
# The CLI's `ingest` names the importers' formats and its `eval` runs the evaluation harness.
CLI_ALSO = ("engine.importers", "engine.evaluation")
# Benchmarks are the evaluation harness too, and they build the embedders the facade takes
# (indexers.embedders) or measure an index component on its own (bench_bm25, bench_hnsw, ...).
BENCHMARKS_ALSO = ("engine.importers", "engine.evaluation", "engine.surfaces.serialize", "indexers", "benchmarks")
# A micro-benchmark of one engine component imports that component, and nothing else below the facade.
COMPONENT_BENCHMARKS = {"bench_micro.py": ("engine.query.ranking",),  # the pure ranking functions
                        "summary_rouge.py": ("engine.summaries.summarizers",),  # the extractive summarizer
                        "locomo_summary_probe.py": ("engine.summaries.summarizers",)}  # its summary variants
# The facade's parts: a caller above it uses its calls, not these attributes.
ENGINE_PARTS = {"store", "pipeline", "searcher", "navigator", "summaries", "summary_index", "deleter", "ingestor",
                "locks", "write_lock", "context", "days"}
# Known exceptions, each with its reason. run_scale.py compares designs on the very same windows:
# the naive baseline and the peers are built from our shard's windows and vectors, and the query
# embedder is swapped between latency kinds (a real model, a given vector, a fixed cost) on one index.
# locomo_summary_probe.py is a research probe: it swaps summary texts into one indexed corpus's
# store per variant (the point: minutes instead of a replay per variant), which no facade call does.
# peers/locomo.py runs our engine beside the peers in one process: it reads the corpus's turns from
# the store, the embedder from the pipeline and times the searcher with the query vector given.
# ingest_fingerprint.py hashes what ingest wrote: the store's rows and the shard's windows and BM25 index.
READS_ENGINE_PARTS = {"benchmarks/run_scale.py", "benchmarks/locomo_summary_probe.py", "benchmarks/peers/locomo.py",
                      "benchmarks/ingest_fingerprint.py"}
# argparse's own names, which its documentation uses: private to argparse, not to the engine.
LIBRARY_PRIVATES = {"_SubParsersAction", "_actions"}
STORE = "engine.store"
# What running SQL looks like from outside: the database's methods, the driver, a statement's text.
SQL_CALLS = frozenset({"execute", "executemany", "fetch_arrow", "insert_arrow", "sql"})
SQL_MODULES = ("duckdb", "engine.store.db")
SQL_TEXT = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|WITH)\s")


def within(name: str, layers: str | tuple[str, ...]) -> bool:
    """Whether a dotted module name is one of `layers` or inside one of them."""
    return any(name == layer or name.startswith(layer + ".") for layer in ((layers,) if isinstance(layers, str) else layers))


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_indexers_use_only_the_engines_lowest_layer():
    offenders = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / "indexers").rglob("*.py")
        for name in imports_of(path)
        if within(name, "engine") and not within(name, ALLOWED_FOR_INDEXERS)
    }
    assert not offenders, sorted(offenders)


def test_the_core_never_imports_a_surface():
    core = [p for p in (ROOT / "engine").rglob("*.py") if not within(module_of(p), SURFACES)]
    offenders = {f"{p.relative_to(ROOT)} imports {n}" for p in core for n in imports_of(p) if within(n, SURFACES)}
    assert not offenders, sorted(offenders)


def test_modules_stay_small():
    """Small modules with one job each: a module past ~450 lines is a sign it holds two."""
    big = {str(p.relative_to(ROOT)): n for p in [*(ROOT / "engine").rglob("*.py"), *(ROOT / "indexers").rglob("*.py")]
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > 460}
    assert not big, big


def test_the_web_page_reads_through_the_facade_only():
    """No SQL in the web layer: it may not reach the store, the database or the query layer directly."""
    below = ("engine.store", "engine.query.navigation", "engine.query.search", "engine.summaries", "indexers", "duckdb")
    offenders = {f"{p.relative_to(ROOT)} imports {n}" for p in (ROOT / "engine" / "surfaces" / "web").rglob("*.py")
                 for n in imports_of(p) if within(n, below)}
    assert not offenders, sorted(offenders)


def _allowed(path: Path) -> tuple[str, ...]:
    """What the module at `path` (a surface or a benchmark) may import of the engine and indexers."""
    name = module_of(path)
    if within(name, "benchmarks"):
        return THROUGH_THE_FACADE + BENCHMARKS_ALSO + COMPONENT_BENCHMARKS.get(path.name, ())
    return THROUGH_THE_FACADE + (SURFACES,) + (CLI_ALSO if within(name, SURFACES + ".cli") else ())


def _above_the_facade() -> list[Path]:
    return [*(ROOT / "engine" / "surfaces").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]


def _forbidden_imports(path: Path, allowed: tuple[str, ...]) -> set[str]:
    return {f"{path.name} imports {n}" for n in imports_of(path)
            if within(n, ("engine", "indexers", "duckdb")) and not within(n, allowed)}


def _private_reads(path: Path) -> set[str]:
    """`x._name` but on the module's own objects (self, cls), and `from engine... import _name`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and node.attr not in LIBRARY_PRIVATES
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.add(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module and within(node.module, ("engine", "indexers")):
            found.update(f"{path.name}:{node.lineno} imports {node.module}.{a.name}"
                         for a in node.names if a.name.startswith("_"))
    return found


def test_surfaces_and_benchmarks_import_only_the_facade_and_records():
    offenders = {hit for p in _above_the_facade() for hit in _forbidden_imports(p, _allowed(p))}
    assert not offenders, sorted(offenders)


def test_surfaces_and_benchmarks_touch_no_private_names():
    """What the engine keeps private stays so: no surface or benchmark reads it."""
    offenders = {hit for p in _above_the_facade() for hit in _private_reads(p)}
    assert not offenders, sorted(offenders)


def _engine_parts_read(path: Path) -> set[str]:
    """`engine.store`, `corpus.engine.pipeline`, ...: a facade part read off an engine object."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ENGINE_PARTS:
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name == "engine":
                found.add(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_surfaces_and_benchmarks_call_the_facade_not_its_parts():
    offenders = {hit for p in _above_the_facade() if str(p.relative_to(ROOT)) not in READS_ENGINE_PARTS
                 for hit in _engine_parts_read(p)}
    assert not offenders, sorted(offenders)
    assert all(_engine_parts_read(ROOT / p) for p in READS_ENGINE_PARTS), "an exception no longer needed: remove it"


def test_the_architecture_checks_can_fail(tmp_path):
    """The checks above catch what they exist for: a reach-around written the old way."""
    probe = tmp_path / "probe.py"
    probe.write_text("from engine.query.search import _Query\nfused = engine.searcher._fuse(1)\n", encoding="utf-8")
    assert _forbidden_imports(probe, THROUGH_THE_FACADE) == {"probe.py imports engine.query.search"}
    assert _private_reads(probe) == {"probe.py:1 imports engine.query.search._Query", "probe.py:2 engine.searcher._fuse"}
    assert _engine_parts_read(probe) == {"probe.py:2 engine.searcher"}


def test_the_facade_is_typed_and_documented():
    """Every public call says why in a docstring and names its parameters: no **options to guess."""
    undocumented, untyped = [], []
    for name, member in vars(ConversationEngine).items():
        call = member.__func__ if isinstance(member, staticmethod) else member
        if name.startswith("_") or not callable(call):
            continue
        if not (call.__doc__ or "").strip():
            undocumented.append(name)
        signature = inspect.signature(call)
        untyped += [f"{name}({p.name})" for p in signature.parameters.values()
                    if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or (p.name != "self" and p.annotation is p.empty)]
        untyped += [f"{name} -> ?"] if signature.return_annotation is signature.empty else []
    assert not undocumented and not untyped, (undocumented, untyped)
def sql_of(path: Path) -> set[str]:
    """Where a module runs SQL: a database call, an import of the driver or the database, SQL text."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {f"imports {name}" for name in imports_of(path) if within(name, SQL_MODULES)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SQL_CALLS:
            found.add(f"line {node.lineno} calls .{node.func.attr}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_TEXT.match(node.value):
            found.add(f"line {node.lineno} holds SQL {node.value.strip()[:30]!r}")
    return found


def test_only_the_store_runs_sql():
    """The store owns the SQL (engine/store/, the embedding cache included): every other module asks it."""
    modules = [p for p in [*(ROOT / "engine").rglob("*.py"), *(ROOT / "indexers").rglob("*.py")]
               if not within(module_of(p), STORE)]
    offenders = {f"{p.relative_to(ROOT)} {what}" for p in modules for what in sql_of(p)}
    assert not offenders, sorted(offenders)


def test_the_sql_check_sees_sql(tmp_path: Path):
    """The check above must be able to fail: it finds each form of SQL in a module."""
    module = tmp_path / "m.py"
    module.write_text("import duckdb\nfrom engine.store.db import Database\n"
                      "def f(store):\n    return store.db.execute(f'SELECT 1 FROM {store}')\n", encoding="utf-8")
    assert {w.split(" ", 2)[-1] if w.startswith("line") else w for w in sql_of(module)} == {
        "imports duckdb", "imports engine.store.db", "calls .execute()", "holds SQL 'SELECT 1 FROM'"}


def test_only_the_store_bumps_a_users_summary_revision():
    """Summary indexes key on the store's per-user revision: a bump from outside could miss a write."""
    offenders = {
        f"{p.relative_to(ROOT)} line {node.lineno}"
        for p in [*(ROOT / "engine").rglob("*.py"), *(ROOT / "indexers").rglob("*.py")] if not within(module_of(p), STORE)
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "summaries_changed"
    }
    assert not offenders, sorted(offenders)


def test_the_helpers_indexers_may_use_import_nothing_else_of_the_engine():
    helpers = ("engine.subprocesses", "engine.collector")
    offenders = {f"{name} imports {n}" for name in helpers
                 for n in imports_of(ROOT / f"{name.replace('.', '/')}.py") if within(n, "engine") and n not in helpers}
    assert not offenders, sorted(offenders)


def test_numpy_files_are_read_through_the_one_locked_reader():
    """indexers/npy_files.py: NumPy parses a file's header with ast.literal_eval, which CPython 3.11
    cannot run in two threads at once; a load that bypasses its lock can fail with SystemError."""
    reader = ROOT / "indexers" / "npy_files.py"
    offenders = {
        f"{p.relative_to(ROOT)} line {node.lineno}"
        for p in [*(ROOT / "engine").rglob("*.py"), *(ROOT / "indexers").rglob("*.py")] if p != reader
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "np"
    }
    assert not offenders, sorted(offenders)
