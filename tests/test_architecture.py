"""Layer boundaries, checked on the source: `indexers` never reaches the query layer or a surface,
and only the store runs SQL."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What indexers may use of the engine: its lowest layer (errors, records, settings, the store).
ALLOWED_FOR_INDEXERS = ("engine.errors", "engine.models", "engine.config", "engine.timeutil", "engine.store")
SURFACES = "engine.surfaces"
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
