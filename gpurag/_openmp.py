"""OpenMP's wait policy, set before any OpenMP runtime loads (FAISS and torch each bundle one).

By default a libgomp worker spins for a while after each parallel region. On a shared or
oversubscribed machine the spinning threads take the cores the other threads of the same
region need: on 2 cores at a load of 15, FAISS's PCA training of alias resolution (34k x 384)
took 21 s instead of 0.8 s, and HNSW construction twice as long. Passive waiting gives the
same results (the thread count, and so every FAISS output, is unchanged). A policy the user
set (``OMP_WAIT_POLICY``) is kept.
"""

from __future__ import annotations

from collections.abc import MutableMapping

WAIT_POLICY = "PASSIVE"


def set_wait_policy(environ: MutableMapping[str, str] | None = None) -> str:
    """Make ``OMP_WAIT_POLICY`` passive unless already set; returns the policy in force."""
    if environ is None:  # the process's: written through the one module that touches it
        from gpurag.settings import library_default

        return library_default("OMP_WAIT_POLICY", WAIT_POLICY)
    return environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)


def threads_spin(environ: MutableMapping[str, str] | None = None) -> bool:
    """Whether other thread pools (ONNX Runtime's) may spin-wait too: only when OpenMP's
    policy is ``ACTIVE`` (the user's choice for a machine of its own). ONNX Runtime spins by
    default; on 2 cores at a load of 13, 300 passages embedded in 25.7-37.5 s spinning and
    18.9-23.8 s not, the same vectors."""
    policy = (set_wait_policy() if environ is None  # the policy in force (set at import)
              else environ.get("OMP_WAIT_POLICY", WAIT_POLICY))
    return policy.strip().upper() == "ACTIVE"
