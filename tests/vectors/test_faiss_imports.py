"""FAISS is reached through ``vectors.faiss_setup.configured_faiss`` only: a module that imports
faiss itself could run first, before the process's thread count and BLAS threshold are set,
and its results would then depend on which module the process happened to call first."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gpurag"
ALLOWED = {"vectors/faiss_setup.py", "backends/probe.py"}  # the set-up, and the probe that asks


def _imports_faiss(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "faiss"
                                                for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "faiss":
            return True
    return False


def test_only_the_setup_module_imports_faiss():
    offenders = sorted(
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
        if str(path.relative_to(PACKAGE)) not in ALLOWED
        and _imports_faiss(ast.parse(path.read_text(encoding="utf-8"))))
    assert offenders == []
