"""No import cycles among the project's modules (issue 24), read from the code with ``ast``.

What counts: every ``import`` a module makes, at module level or inside a function (a function's
import is a cycle waiting for the first caller that imports in the other order, and it hides the
layering as well), except those under ``if TYPE_CHECKING:`` (never executed). ``from pkg import
name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``. A package's
``__init__`` is its own module (``pkg``); importing ``pkg.mod`` is an edge to ``pkg.mod`` only.
A new cycle fails the test, naming its modules; ``python tests/foundation/test_import_cycles.py``
prints every cycle.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("planner", "formulation", "estimators", "simulator", "executor", "benchmarks")


def modules() -> dict[str, Path]:
    out = {}
    for top in PACKAGES:
        for p in sorted((ROOT / top).rglob("*.py")):
            rel = p.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for n in child.orelse:
                    visit(n)
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    if a.name in known:
                        found.add(a.name)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (child.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                for a in child.names:
                    full = f"{base}.{a.name}" if base else a.name
                    if full in known:
                        found.add(full)
                    elif base in known:
                        found.add(base)
            visit(child)

    visit(tree)
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: imports(m, p, known) for m, p in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def test_the_project_has_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles (each line: modules that import each other, directly or around):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [["a", "b", "c"]]


if __name__ == "__main__":
    for c in cycles(graph()):
        print(" <-> ".join(c))
    sys.exit(0)
