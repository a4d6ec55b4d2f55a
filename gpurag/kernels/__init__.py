"""GPU kernels (torch, any device) with a NumPy reference beside each.

* :mod:`gpurag.kernels.ppr_batched` -- batched personalized PageRank, sparse x dense power iteration
  (reference: :mod:`gpurag.kernels.ppr_reference`);
* :mod:`gpurag.kernels.topk` -- per-query top-k over dense score matrices and CSR-segmented vectors;
* :mod:`gpurag.kernels.knn` -- exact inner-product kNN, chunked matmul + running top-k merge.

Everything here needs torch (the ``gnn`` extra) and nothing else of gpurag; importing this
package does not import torch, the submodules do.
"""

__all__ = ["knn", "ppr_batched", "ppr_reference", "topk"]
