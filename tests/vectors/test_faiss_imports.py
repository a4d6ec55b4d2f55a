"""FAISS is reached through ``vectors.faiss_setup.configured_faiss`` only: a module that imports
faiss itself could run first, before the process's thread count and BLAS threshold are set,
and its results would then depend on which module the process happened to call first."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gpurag"
ALLOWED = {"vectors/faiss_setup.py", "backends/probe.py"}  # the set-up, and the probe that asks
# Calls that import a module named by their first argument (``importlib.import_module``,
# ``import_module`` imported from importlib, ``__import__``, ``gpurag.device.has_module``).
IMPORTING_CALLS = {"import_module", "__import__", "has_module"}


def _is_faiss(name: object) -> bool:
    return isinstance(name, str) and name.split(".")[0] == "faiss"


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _imports_faiss(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(_is_faiss(a.name) for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and _is_faiss(node.module or ""):
            return True
        if (isinstance(node, ast.Call) and _call_name(node.func) in IMPORTING_CALLS
                and node.args and isinstance(node.args[0], ast.Constant)
                and _is_faiss(node.args[0].value)):
            return True
    return False


@pytest.mark.parametrize("source", [
    "import faiss",
    "import faiss.contrib.torch_utils as tu",
    "from faiss import IndexFlatIP",
    "import importlib\nfaiss = importlib.import_module('faiss')",
    "from importlib import import_module\nf = import_module('faiss.contrib')",
    "f = __import__('faiss')",
    "from gpurag.device import has_module\nok = has_module('faiss')",
])
def test_every_way_of_importing_faiss_is_caught(source):
    assert _imports_faiss(ast.parse(source))


@pytest.mark.parametrize("source", [
    "import faiss_setup",
    "from gpurag.vectors.faiss_setup import configured_faiss",
    "import importlib\nm = importlib.import_module('faissx')",
    "import importlib\nm = importlib.import_module(name)",
    "print('faiss')",
])
def test_other_imports_are_not_mistaken_for_faiss(source):
    assert not _imports_faiss(ast.parse(source))


def test_only_the_setup_module_imports_faiss():
    offenders = sorted(
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
        if str(path.relative_to(PACKAGE)) not in ALLOWED
        and _imports_faiss(ast.parse(path.read_text(encoding="utf-8"))))
    assert offenders == []
