"""The on-disk index: a directory with a manifest, Parquet tables, .npy arrays and FAISS files.

Written into a temporary sibling and renamed into place; opening checks the format version and
that every file listed in the manifest is present with the recorded size (and, on request, the
recorded sha256). No pickle anywhere.
"""

from gpurag.store.manifest import FORMAT_NAME, FORMAT_VERSION, Manifest, read_manifest
from gpurag.store.writer import IndexWriter, open_index_dir

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "IndexWriter",
    "Manifest",
    "open_index_dir",
    "read_manifest",
]
