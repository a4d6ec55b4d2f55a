"""No import circle among gpurag's modules, through module-level or function-level imports;
the device is chosen in one package (:mod:`gpurag.backends`) and the composition root
(:mod:`gpurag.runtime`) is imported by no layer it composes. Read from the source with ``ast``
(no import runs); ``if TYPE_CHECKING:`` blocks and a module's imports of its own parent
packages (which Python runs first anyway) are not edges."""

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


def _imports(tree: ast.Module, module_level: bool):
    """Import statements, skipping ``if TYPE_CHECKING:`` blocks (and function bodies when
    ``module_level``)."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
        elif module_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                ast.Lambda)):
            continue
        else:
            stack.extend(ast.iter_child_nodes(node))


def import_graph(module_level: bool) -> dict[str, set[str]]:
    mods = _modules()

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")), module_level):
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




def test_no_circle_through_function_level_imports():
    found = set(circles(import_graph(module_level=False)))
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


def test_the_query_and_eval_do_not_import_the_layers_above_them():
    graph = import_graph(module_level=False)
    assert not {t for t in graph["gpurag.query.graph"] if t.startswith("gpurag.rerank")}
    assert not {t for m, ts in graph.items() if m.startswith("gpurag.eval")
                for t in ts if t.startswith("gpurag.memory")}


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
