"""``tuner/`` imports run one way: no module reaches itself again through its imports.

A circle of imports is how layers blur: once ``a`` needs ``b`` and ``b`` needs ``a``, neither can be read,
tested or replaced alone, and the fix drifts toward imports hidden inside functions. The graph is read
from the source with :mod:`ast` (no module is executed), counting every import, including those inside
functions, since a deferred import is still a dependency. The test fails naming one cycle per strongly
connected group, in import order, so the message says which edge to cut.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tuner"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(importer: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module named by ``from <level dots><target> import …`` inside ``importer``."""
    if level == 0:
        return target or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph() -> dict[str, set[str]]:
    """Edges ``module -> modules of tuner it imports`` (a package counts as its ``__init__``)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node.level, node.module)
                # ``from pkg import mod`` imports the submodule when one exists, else a name of pkg.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base for alias in node.names]
            for target in targets:
                while target and target not in paths:  # ``import tuner.sim.gpu.x`` -> the longest known prefix
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """Per strongly connected group of two or more modules (Tarjan): one shortest cycle
    through its first module, and the whole group (every member lies on some cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                connect(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [(_cycle_in(group, graph), sorted(group)) for group in groups]


def _cycle_in(group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path from the group's first module back to itself, staying inside the group."""
    start = min(group)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & group):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if succ not in parents:
                    parents[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no cycle inside {sorted(group)}")


def test_the_graph_sees_relative_and_deferred_imports():
    graph = import_graph()
    assert "tuner.errors" in graph["tuner.search.outcome"]  # ``from ..errors import …``
    assert "tuner.sim" in graph["tuner.sim.service"] or "tuner.sim.gpu" in graph["tuner.sim.service"]


def test_cycles_are_found_and_named():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [(["a", "b", "c", "a"], ["a", "b", "c"])]
    assert cycles({"a": {"b", "c"}, "b": {"a"}, "c": {"a"}}) == [(["a", "b", "a"], ["a", "b", "c"])]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_tuner_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles in tuner/:\n" + "\n".join(
        f"  {' -> '.join(cycle)}" + (f"  (the group: {', '.join(group)})" if len(group) > len(cycle) - 1 else "")
        for cycle, group in found)
