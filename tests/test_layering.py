"""Layers inside `pipelines/`, kept honest (issue 34): each package may import only the packages below it in
`ALLOWED`, `config` and `planning` import neither the ledger nor the connectors, and no module import cycle
exists anywhere under `dpstream`. Imports are read from the source (module level, inside functions, and under
TYPE_CHECKING alike: a type-only import is a dependency too).

`KNOWN` lists the back-edges the tree still has, each with the reason it is there; issue 34 removes them, and
the test fails when one is removed without being struck from the list (so the list only shrinks), or when a new
one appears. The negative controls check that an injected back-edge and an injected cycle are caught."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = ("accounting", "connectors", "pipelines", "examples")

ALLOWED: dict[str, set[str]] = {
    "config": set(),
    "mechanisms": {"config"},
    "planning": {"config", "mechanisms"},
    "transforms": {"config", "mechanisms", "planning"},
    "report": {"config", "mechanisms", "planning", "transforms"},
    "run": {"config", "mechanisms", "planning", "transforms", "report"},
    "cli": {"config", "mechanisms", "planning", "transforms", "report", "run"},
}
"""pipelines package -> the pipelines packages it may import (data flows config -> planning -> transforms ->
run; `report` renders what `run` hands it; `cli` is the top)."""

FORBIDDEN_BELOW = {"config": ("dpstream.connectors", "dpstream.accounting.ledger"),
                   "planning": ("dpstream.connectors", "dpstream.accounting.ledger")}
"""Packages that hold public parameters and plans: no files, no database (the ledger loads SQLAlchemy)."""

KNOWN = {
    ("pipelines/config/specs.py", "dpstream.pipelines.mechanisms.fixedpoint"):
        "value grids are computed by the exact fixed-point module; it moves under config with the registry",
    ("pipelines/config/jobfile.py", "dpstream.connectors.readers"): "the job-file parser builds input specs",
    ("pipelines/config/jobfile.py", "dpstream.connectors.writers"): "the job-file parser checks output formats",
    ("pipelines/config/jobfile.py", "dpstream.connectors.timestamps"): "the job-file parser checks time formats",
    ("pipelines/config/jobfile.py", "dpstream.connectors.pubsub"): "the job-file parser builds Pub/Sub sources",
}
"""(file, imported module) -> why the back-edge is still there."""

KNOWN_CYCLES = {
    frozenset({f"dpstream.accounting.filters{name}" for name in ("", ".base", ".fsrc", ".gdp", ".pure", ".zcdp")}):
        "a filter's base class looks its subclasses up in the package (a lazy import)",
}


def _module(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return "dpstream." + ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module(p): p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))}


def imports_of(source: str, modules: set[str]) -> set[str]:
    """The dpstream modules a source text imports: `from a.b import c` is a.b.c when that is a module, else a.b."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                      for alias in node.names}
    return {name for name in found if name in modules}


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "pipelines" else None


def back_edges(graph: dict[str, set[str]], files: dict[str, str]) -> set[tuple[str, str]]:
    """(file, imported module) pairs that break `ALLOWED` or `FORBIDDEN_BELOW`."""
    found = set()
    for module, targets in graph.items():
        source = _package(module)
        if source is None:
            continue
        for target in targets:
            below = _package(target)
            if below is not None and below != source and below not in ALLOWED[source]:
                found.add((files[module], target))
            if target.startswith(FORBIDDEN_BELOW.get(source, ())):
                found.add((files[module], target))
    return found


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _graph() -> tuple[dict[str, set[str]], dict[str, str]]:
    modules = _modules()
    names = set(modules)
    graph = {name: imports_of(path.read_text(encoding="utf-8"), names) - {name} for name, path in modules.items()}
    return graph, {name: str(path.relative_to(ROOT)) for name, path in modules.items()}


def test_pipelines_layers_have_no_back_edge_but_the_known_ones():
    graph, files = _graph()
    found = back_edges(graph, files)
    assert found - set(KNOWN) == set(), "new back-edges"
    assert set(KNOWN) - found == set(), "back-edges fixed: strike them from KNOWN"


def test_no_module_import_cycle_but_the_known_ones():
    graph, _ = _graph()
    assert set(cycles(graph)) == set(KNOWN_CYCLES)


def test_an_injected_back_edge_and_cycle_are_caught():
    """Negative controls: planning importing run, and two modules importing each other."""
    graph, files = _graph()
    graph["dpstream.pipelines.planning.grid"] = graph["dpstream.pipelines.planning.grid"] | {
        "dpstream.pipelines.run.budget"}
    assert ("pipelines/planning/grid.py", "dpstream.pipelines.run.budget") in back_edges(graph, files)
    graph["dpstream.pipelines.mechanisms.noise"] = graph["dpstream.pipelines.mechanisms.noise"] | {
        "dpstream.pipelines.transforms.windowing"}
    assert any({"dpstream.pipelines.mechanisms.noise", "dpstream.pipelines.transforms.windowing"} <= cycle
               for cycle in cycles(graph))
