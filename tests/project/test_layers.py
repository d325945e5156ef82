"""Imports run one way: `cli` -> `defs` (with `assets/`) -> the middle packages -> `core` -> the sealed `grader`.

The import graph is built from the source with ast (nothing is imported), every import counted, also the ones
inside functions: a late import hides a dependency from a reader, not from this test."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO_ROOT

PACKAGES = ("pipelines", "assets", "grader")
"""Our Python packages (sql, demo and dagster_home carry data and import nothing)."""

LAYERS = (
    ("cli", ("pipelines.cli",)),
    ("defs", ("pipelines.defs", "assets")),
    ("middle", ("pipelines.reporting", "pipelines.publishing", "pipelines.grading", "pipelines.curation",
                "pipelines.importers")),
    ("core", ("pipelines.core",)),
    ("grader", ("grader",)),
)
"""Top to bottom. A module may import its own layer or any layer below it, never one above."""
MIDDLE = dict(LAYERS)["middle"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if "catalogue" in path.relative_to(REPO_ROOT).parts:  # task cards' Python text, run only in workers
                continue
            found[_module_name(path)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The most specific module of ours that an imported name lives in (None: not ours)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (anywhere in its body)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            deps.update(m for m in (_resolve(t, modules) for t in targets) if m and m != name)
        graph[name] = deps
    return graph


def layer_of(module: str) -> int | None:
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read_from_source():
    graph = import_graph()
    assert "pipelines.cli" in graph and "pipelines.core.warehouse" in graph["pipelines.reporting.lineage"]
    assert "assets" in graph["pipelines.defs.definitions"]


def test_no_import_cycle():
    assert _cycles(import_graph()) == []


def test_every_module_stands_in_a_layer():
    stray = [m for m in import_graph() if layer_of(m) is None and m != "pipelines"]
    assert stray == [], f"modules in no layer (pipelines/ holds subpackages only): {stray}"


def test_no_upward_import():
    upward = [(m, d) for m, deps in import_graph().items() for d in deps
              if layer_of(m) is not None and layer_of(d) is not None and layer_of(d) < layer_of(m)]
    assert upward == [], "imports against the layer order: " + ", ".join(f"{m} -> {d}" for m, d in upward)
    assert all(not d.startswith(("pipelines", "assets")) for m, deps in import_graph().items()
               if m.startswith("grader") for d in deps), "the sealed grader imports nothing of ours"


def test_the_middle_packages_depend_on_each_other_one_way():
    """reporting, publishing, grading, curation and importers may use one another, but never both ways."""
    between: dict[str, set[str]] = defaultdict(set)
    for m, deps in import_graph().items():
        src = next((p for p in MIDDLE if m == p or m.startswith(p + ".")), None)
        for d in deps:
            dst = next((p for p in MIDDLE if d == p or d.startswith(p + ".")), None)
            if src and dst and src != dst:
                between[src].add(dst)
    assert _cycles(dict(between)) == []


def test_one_module_name_stands_for_one_module():
    """Two modules with one name in two packages (as `claims`, `splits`, `learning` and `contention` once were
    in both assets/ and pipelines/) make a reader guess which one is meant."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for m, path in _modules().items():
        if path.name not in ("__init__.py", "__main__.py") and not m.startswith("grader"):
            by_name[m.rpartition(".")[2]].append(m)
    assert {n: ms for n, ms in by_name.items() if len(ms) > 1} == {}


def test_the_pipeline_uses_only_the_public_api_of_dagster_and_the_hub_clients():
    """`dagster._core` and `huggingface_hub.utils._http` change without notice between releases (and the Hub's
    client factory is process-wide): the pipeline's packages import neither these nor any other private module
    of the libraries it is built on. (The grader reads torch's private state on purpose, to seal it.)"""
    private = []
    for name, path in _modules().items():
        if name.startswith("grader"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [f"{node.module}.{a.name}" for a in node.names]
                       if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            private += [f"{name}: {t}" for t in targets
                        if t.split(".")[0] in ("dagster", "huggingface_hub", "datasets")
                        and any(part.startswith("_") for part in t.split(".")[1:])]
    assert private == []
