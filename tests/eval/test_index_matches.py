"""check_index_matches: an evaluated index must be the corpus's; the blank doc id a local
delete leaves in the chunk table (a tombstoned row) is not a foreign passage."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from gpurag.errors import ConfigError
from gpurag.eval.runner import check_index_matches


def _index(doc_ids, documents):
    return SimpleNamespace(chunks=pd.DataFrame({"doc_id": doc_ids}),
                           manifest=SimpleNamespace(counts={"documents": documents}))


def _corpus(tmp_path, ids):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": "t " + i}) + "\n" for i in ids))
    return path


def test_a_deleted_chunks_blank_doc_id_is_not_a_foreign_passage(tmp_path):
    corpus = _corpus(tmp_path, ["a", "b", "c"])
    check_index_matches(_index(["a", "", "c"], 3), "idx", corpus)  # b deleted: blank row
    check_index_matches(_index(["a", "b", "c"], 3), "idx", corpus)
    with pytest.raises(ConfigError, match="1 of its passage ids are not in the corpus"):
        check_index_matches(_index(["a", "", "z"], 3), "idx", corpus)
