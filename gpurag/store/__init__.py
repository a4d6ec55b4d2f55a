"""The on-disk index: a directory with a manifest, Parquet tables, .npy arrays and FAISS files.

Written into a temporary sibling under a per-path write lock and swapped into place; opening
checks the format version, the layout, the paths, sizes and content of every listed file and
pins the opened version (see :mod:`gpurag.store.reader`). No pickle anywhere.
"""

from gpurag.store.layout import MANIFEST
from gpurag.store.lock import WriteLock
from gpurag.store.manifest import FORMAT_NAME, FORMAT_VERSION, Manifest, read_manifest
from gpurag.store.reader import IndexDir, current_manifest, open_index_dir
from gpurag.store.writer import IndexWriter

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST",
    "IndexDir",
    "IndexWriter",
    "Manifest",
    "WriteLock",
    "current_manifest",
    "open_index_dir",
    "read_manifest",
]
