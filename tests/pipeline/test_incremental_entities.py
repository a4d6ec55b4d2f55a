"""Display names of a local update (issue 34): derived for the entities whose names changed
only, the same as deriving them all when the stored ones follow the rule."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpurag.pipeline.incremental_local import update_entities


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    names = pd.DataFrame({"name": ["Ann", "Anne", "Bob", "Bobby", "Cy", "Dee"],
                          "entity": np.array([0, 0, 1, 1, 2, 3], np.int32),
                          "count": np.array([3, 3, 5, 1, 2, 1], np.int64)})
    entities = pd.DataFrame({"entity_id": np.arange(3, dtype=np.int32),
                             "name": ["Anne", "Bob", "Cy"],
                             "n_aliases": np.array([2, 2, 1], np.int32),
                             "count": [6.0, 6.0, 2.0], "label": ["PER", "PER", "PER"],
                             "n_passages": np.array([1, 1, 1], np.int32),
                             "n_mentions": np.array([1, 1, 1], np.int32)})
    return entities, names


def test_changed_entities_only_get_their_display_name_derived():
    entities, names = _tables()
    zero = np.zeros(4, np.int64)
    full = update_entities(entities, names, 3, ["ORG"], zero, zero)
    part = update_entities(entities, names, 3, ["ORG"], zero, zero, np.array([1]))
    pd.testing.assert_frame_equal(full, part)  # stored names follow the rule: the same table
    assert full["name"].tolist() == ["Anne", "Bob", "Cy", "Dee"]
    # Bobby now most frequent: only the changed entity's name moves, a stale unchanged one
    # (stored "Cy" renamed) is kept as stored
    names.loc[3, "count"] = 9
    entities.loc[2, "name"] = "Cyrus"
    got = update_entities(entities, names, 3, ["ORG"], zero, zero, np.array([1]))
    assert got["name"].tolist() == ["Anne", "Bobby", "Cyrus", "Dee"]
    assert got["count"].tolist() == [6.0, 14.0, 2.0, 1.0]
    none = update_entities(entities, names, 3, ["ORG"], zero, zero, np.zeros(0, np.int64))
    assert none["name"].tolist() == ["Anne", "Bob", "Cyrus", "Dee"]
