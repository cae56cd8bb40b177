"""The Python package's shape: its modules import each other without a cycle (counting imports
inside functions, which only hide one), so each can be read, tested and changed from the bottom up."""
from __future__ import annotations

import ast
from pathlib import Path

import sluice

PACKAGE = Path(sluice.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    return {("sluice" if p.stem == "__init__" else f"sluice.{p.stem}"): p for p in PACKAGE.glob("*.py")}


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the sluice modules it imports anywhere in its source (`if TYPE_CHECKING:` blocks,
    which never run, excepted). `from sluice import x` imports module sluice.x when there is one,
    else the package itself."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and getattr(node.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(node)}
        edges: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name.split(".")[0] == "sluice"}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sluice":
                if node.module == "sluice":
                    edges |= {f"sluice.{a.name}" if f"sluice.{a.name}" in modules else "sluice" for a in node.names}
                else:
                    edges.add(node.module)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each module that is on a cycle (depth-first search)."""
    found: list[list[str]] = []
    on_cycle: set[str] = set()

    def visit(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                if not on_cycle & set(path):
                    found.append(path + [nxt])
                    on_cycle.update(path)
            elif nxt not in path:
                visit(path + [nxt])

    for start in sorted(graph):
        visit([start])
    return found


def test_the_checker_finds_a_cycle_through_an_import_inside_a_function() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    tree = ast.parse("def f():\n    from sluice import _x\n")
    assert isinstance(tree.body[0].body[0], ast.ImportFrom)  # what import_graph walks into


def test_no_import_cycle_among_the_package_modules() -> None:
    graph = import_graph(_modules())
    assert graph["sluice._errors"] == set()  # the bottom: every module may raise sluice's errors
    assert "sluice" in graph and len(graph) >= 10
    assert cycles(graph) == [], cycles(graph)
