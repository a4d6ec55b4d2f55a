"""GPU kernels (torch, any device) with a NumPy reference beside each.

* :mod:`kernels.ppr_batched` -- batched personalized PageRank, sparse x dense power iteration
  (reference: :mod:`kernels.ppr_reference`);
* :mod:`kernels.topk` -- per-query top-k over dense score matrices and CSR-segmented vectors;
* :mod:`kernels.knn` -- exact inner-product kNN, chunked matmul + running top-k merge.

Everything here needs torch (the ``gnn`` extra) and nothing else of gpurag; importing this
package does not import torch, the submodules do.
"""

__all__ = ["knn", "ppr_batched", "ppr_reference", "topk"]
