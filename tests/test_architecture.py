"""Layer boundaries, checked on the source: `indexers` never reaches the query layer or a surface."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What indexers may use of the engine: its lowest layer (errors, records, settings, the store).
ALLOWED_FOR_INDEXERS = ("engine.errors", "engine.models", "engine.config", "engine.timeutil", "engine.store")
SURFACES = "engine.surfaces"


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
