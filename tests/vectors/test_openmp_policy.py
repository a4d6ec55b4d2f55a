"""OpenMP waits passively (set when gpurag is imported, before FAISS loads its runtime)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Records the policy in force when faiss is first imported, then builds through gpurag.
PROBE = """
import os, sys
seen = []
class Probe:
    def find_spec(self, name, path=None, target=None):
        if name == "faiss" and not seen:
            seen.append(os.environ.get("OMP_WAIT_POLICY"))
        return None
sys.meta_path.insert(0, Probe())
import numpy as np
from gpurag.vectors.faiss_index import build_index
build_index(np.eye(4, dtype=np.float32), 200_000)
print(seen[0])
"""


def _probe(**env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    environ.update(env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", PROBE], env=environ, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_faiss_loads_with_a_passive_wait_policy():
    assert _probe() == "PASSIVE"


def test_a_policy_the_user_set_is_kept():
    assert _probe(OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
