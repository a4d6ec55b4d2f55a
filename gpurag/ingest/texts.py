"""Documents given as Python values (``Index.build(["text", ...], out)``): strings or records
``{"id", "text", "title"}``, written to a JSONL file that the ordinary reader then reads (so
bad records are reported and counted the same way, and a killed build resumes).

A string, or a record without an ``id``, gets the id ``doc-<16 hex digits of its text's
BLAKE2b>``: the same text always gets the same id, so inserting it again is reported as
already indexed instead of being added twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpurag.errors import InputError

TEXTS_FILE = "texts.jsonl"  # a fixed name: the build's resume key covers name and content


def is_texts(source: Any) -> bool:
    """Whether ``source`` is a collection of texts or records rather than a path."""
    return not isinstance(source, (str, bytes, os.PathLike)) and isinstance(source, Iterable)


def text_id(text: str) -> str:
    """The id of a text given without one."""
    data = text.encode("utf-8", "surrogatepass")
    return "doc-" + hashlib.blake2b(data, digest_size=8).hexdigest()


def as_record(item: Any, i: int) -> dict[str, Any]:
    """The JSONL record of the ``i``-th text or record given."""
    if isinstance(item, str):
        return {"id": text_id(item), "text": item}
    if isinstance(item, dict):
        if "text" not in item:
            raise InputError(f"texts[{i}]: a record needs a 'text' (it has "
                             f"{', '.join(map(repr, list(item)[:8])) or 'no keys'})")
        record = {k: item[k] for k in ("id", "doc_id", "title", "text") if k in item}
        if record.get("id", record.get("doc_id")) in (None, ""):
            text = item["text"]
            record["id"] = text_id(text if isinstance(text, str) else repr(text))
        return record
    raise InputError(f"texts[{i}]: expected a string or a dict with 'text', got "
                     f"{type(item).__name__}")


def write_texts(items: Iterable[Any], path: Path) -> int:
    """Write ``items`` as JSONL to ``path``; returns how many."""
    n = 0
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
        for n, item in enumerate(items, start=1):
            fh.write(json.dumps(as_record(item, n - 1), ensure_ascii=True, default=str) + "\n")
    if n == 0:
        raise InputError("no texts given")
    return n


@contextmanager
def texts_source(items: Iterable[Any], near: Path) -> Iterator[Path]:
    """A JSONL file of ``items`` in a hidden folder beside ``near`` (removed afterwards)."""
    near = Path(near).resolve()
    near.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{near.name}.texts-", dir=near.parent))
    try:
        path = folder / TEXTS_FILE
        write_texts(items, path)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_PATHLIKE_SUFFIXES = (".txt", ".md", ".jsonl", ".gz", ".parquet", ".csv", ".tsv", ".pdf",
                      ".html", ".htm", ".docx", ".rst", ".ndjson")


def _path_like(s: str) -> bool:
    """Whether a string that names no file still reads as a path (a likely typo)."""
    return (len(s) < 4096 and not any(c.isspace() for c in s)
            and ("/" in s or os.sep in s or s.lower().endswith(_PATHLIKE_SUFFIXES)))


def split_sources(items: Iterable[Any]) -> tuple[list[Path], list[Any]]:
    """``items`` as (paths, texts), exactly one of them non-empty: path objects and strings
    naming an existing file or folder are paths, other strings and dicts are texts. A string
    that names nothing but reads as a path, or a mix of both kinds, is an error (a typo must
    not be indexed as a text)."""
    items = list(items)
    paths = [Path(s) for s in items if isinstance(s, os.PathLike)
             or (isinstance(s, str) and len(s) < 4096 and "\n" not in s and Path(s).exists())]
    if len(paths) == len(items) and items:
        return paths, []
    if paths:
        raise InputError(f"give either paths or texts, not both (got {len(paths)} existing "
                         f"paths and {len(items) - len(paths)} other items)")
    typos = [s for s in items if isinstance(s, str) and _path_like(s)]
    if typos:
        raise InputError(f"input not found: {typos[0]} (to index a text that looks like a "
                         "path, pass it as a record: {'text': ...})")
    return [], items
