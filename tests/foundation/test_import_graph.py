"""No import circle among gpurag's modules, through module-level, function-level or ``if
TYPE_CHECKING:`` imports (two modules that name each other's types are one module in two
files); no arrow from a layer to one above it (:data:`FORBIDDEN`); the device is chosen in
one package (:mod:`gpurag.backends`) and the composition root (:mod:`gpurag.runtime`) is
imported by no layer it composes (a type annotation of it aside). Read from the source with
``ast`` (no import runs); a module's imports of its own parent packages (which Python runs
first anyway) are not edges."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gpurag"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.Module, module_level: bool, typing: bool = False):
    """Import statements, skipping function bodies when ``module_level`` and ``if
    TYPE_CHECKING:`` blocks unless ``typing``."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif (not typing and isinstance(node, ast.If)
              and "TYPE_CHECKING" in ast.unparse(node.test)):
            stack.extend(node.orelse)
        elif module_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                ast.Lambda)):
            continue
        else:
            stack.extend(ast.iter_child_nodes(node))


def import_graph(module_level: bool, typing: bool = False) -> dict[str, set[str]]:
    """Module -> the gpurag modules it imports (``typing``: ``if TYPE_CHECKING:`` ones too)."""
    mods = _modules()

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")), module_level,
                             typing):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                names = [f"{base}.{a.name}" for a in node.names]
            for name in names:
                target = known(name) if name.startswith("gpurag") else None
                if target and target != mod and not mod.startswith(target + "."):
                    graph[mod].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_no_circle_through_module_level_imports():
    assert circles(import_graph(module_level=True)) == []




def test_no_circle_through_function_level_or_type_checking_imports():
    found = set(circles(import_graph(module_level=False, typing=True)))
    assert found == set(), sorted(sorted(c) for c in found)


# Layers the runtime composes: they get its parts passed in and never import it (nor the
# package that chooses the parts), so it is built once, at the edge.
COMPOSED = ("gpurag.pipeline", "gpurag.query", "gpurag.graph", "gpurag.vectors",
            "gpurag.embed", "gpurag.resolve", "gpurag.store", "gpurag.ingest")


def test_composed_layers_do_not_import_the_runtime_or_choose_a_backend():
    graph = import_graph(module_level=False)
    wrong = sorted((mod, target) for mod, targets in graph.items() for target in targets
                   if mod.startswith(COMPOSED)
                   and (target == "gpurag.runtime" or target == "gpurag.backends"
                        or (target.startswith("gpurag.backends.")
                        and target not in ("gpurag.backends.part", "gpurag.backends.embed"))))
    assert wrong == []
    # the one exception: a cluster worker (its own process) loads its embedder itself
    uses_embed = sorted(m for m, t in graph.items()
                        if "gpurag.backends.embed" in t and m.startswith(COMPOSED))
    assert uses_embed == ["gpurag.pipeline.distributed"]


# (importer, imported, why not): package prefixes; an arrow between them runs up the layers.
FORBIDDEN = (
    ("gpurag.query", "gpurag.rerank", "the reranker is injected into the retriever, and "
     "rerank.auto ranks its synthetic questions (gpurag.query.synthetic) through the query"),
    ("gpurag.eval", "gpurag.memory", "evaluate takes runners instead of importing memory"),
    ("gpurag.config", "gpurag.extract", "config checks extractor names in gpurag.registry"),
    ("gpurag.registry", "gpurag", "the plug-in registries sit below config"),
    ("gpurag.metrics", "gpurag", "every layer scores with the metrics (eval, rerank.auto)"),
    ("gpurag.rerank", "gpurag.training", "the question generator is gpurag.query.synthetic"),
    ("gpurag.backends", "gpurag.query", "the parts sit below the stages that use them "
     "(import gpurag.backends must not load the query layer and pandas)"),
)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def upward_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The arrows of ``graph`` that :data:`FORBIDDEN` names."""
    return sorted((mod, target) for mod, targets in graph.items() for target in targets
                  for src, dst, _ in FORBIDDEN if _within(mod, src) and _within(target, dst))


def test_no_layer_imports_one_above_it():
    assert upward_arrows(import_graph(module_level=False, typing=True)) == []


def test_the_arrow_checks_see_the_arrows_they_forbid():
    graph = {"gpurag.config": {"gpurag.extract"}, "gpurag.rerank.auto": {"gpurag.training.x"},
             "gpurag.query.graph": {"gpurag.rerank"}, "gpurag.queryx": {"gpurag.rerank"},
             "gpurag.registry": {"gpurag.errors"}, "gpurag.training.cli": {"gpurag.rerank"}}
    assert upward_arrows(graph) == [("gpurag.config", "gpurag.extract"),
                                    ("gpurag.query.graph", "gpurag.rerank"),
                                    ("gpurag.registry", "gpurag.errors"),
                                    ("gpurag.rerank.auto", "gpurag.training.x")]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import gpurag.a\n"
                     "def f():\n    import gpurag.b\n")
    names = [[a.name for a in n.names] for n in _imports(tree, False, typing=True)]
    assert sorted(names) == [["TYPE_CHECKING"], ["gpurag.a"], ["gpurag.b"]]
    assert [[a.name for a in n.names] for n in _imports(tree, True)] == [["TYPE_CHECKING"]]


PROBES = ("faiss_gpu_available", "cugraph_available", "torch_cuda_available",
          "get_num_gpus", "for_device")


def test_devices_and_libraries_are_probed_only_in_the_backends():
    found = []
    for mod, path in _modules().items():
        if mod.startswith("gpurag.backends"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [(mod, node.attr if isinstance(node, ast.Attribute) else node.id)
                  for node in ast.walk(tree)
                  if (isinstance(node, ast.Attribute) and node.attr in PROBES)
                  or (isinstance(node, ast.Name) and node.id in PROBES)]
        found += [(mod, node.name) for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in PROBES]
    assert found == []


def test_the_circle_finder_sees_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        frozenset({"a", "b", "c"})]
