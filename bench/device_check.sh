#!/usr/bin/env bash
# One prepared GPU check for a lent machine (H200 image: Python 3.12, torch CUDA, CuPy, Triton,
# PyG; no cuGraph, FAISS, igraph, graspologic-native). Under 5 minutes. Run from the repo root:
#     bash bench/device_check.sh            (device tool: timeout_s=420; carry [".whl"] optional)
# 1. installs gpurag over the image's packages, 2. runs the kernel and GPU parity tests,
# 3. times copy bandwidth, batched PPR (10M/100M edges; q = 1, 64, 256, 1024), exact kNN
# (1M x 384) and the CPU backend (bench/gpu_bench.py). Logs and the JSON land in bench/results/
# and, when $OUT is set, in $OUT. FAISS is not needed: nothing the GPU tests import pulls it in
# (gpurag.vectors imports faiss lazily), so no faiss wheel is carried.
# The editable install needs the build backend (hatchling), which the image lacks: carry .whl/
# holding hatchling and trove-classifiers wheels (docs/GPU.md); without them the install fails
# fast (no index is consulted) and the repo root goes on PYTHONPATH instead.
PIP_NO_INDEX=1 PIP_FIND_LINKS="$PWD/.whl" PIP_DISABLE_PIP_VERSION_CHECK=1 \
  python3 -m pip install -q --no-deps -e . \
  || echo "device_check: editable install unavailable (no hatchling wheel carried); using PYTHONPATH"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
set -u -o pipefail

RESULTS=bench/results
mkdir -p "$RESULTS"
STAMP=$(date -u +%Y-%m-%dT%H%M%SZ)
LOG="$RESULTS/device_check_${STAMP}.log"
MARK=$(mktemp)  # results newer than this are this run's
START=$SECONDS

{
  echo "== device_check $STAMP"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv,noheader 2>&1 || echo "nvidia-smi unavailable"
  python3 - <<'EOF'
import importlib, platform
import torch
print("python", platform.python_version(), "| torch", torch.__version__, "cuda", torch.version.cuda,
      "| gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
for mod in ("cupy", "triton", "torch_geometric", "pylibcugraph", "faiss", "igraph",
            "graspologic_native", "pandas", "pyarrow", "scipy"):
    try:
        m = importlib.import_module(mod)
        print(f"  {mod:<20} {getattr(m, '__version__', 'present')}")
    except Exception as exc:
        print(f"  {mod:<20} missing ({type(exc).__name__})")
import gpurag, kernels
from gpurag.graph.backend import plan
print("gpurag", gpurag.__version__, "plan(cuda):", plan("cuda"))
EOF
} 2>&1 | tee "$LOG"

echo "== tests (kernels, tests/gpu)" | tee -a "$LOG"
timeout 100 python3 -m pytest kernels tests/gpu -q -p no:cacheprovider -rs 2>&1 | tee -a "$LOG"
TESTS_RC=$?
echo "tests exit code $TESTS_RC after $((SECONDS - START)) s" | tee -a "$LOG"

echo "== bench (budget 150 s)" | tee -a "$LOG"
timeout 200 python3 bench/gpu_bench.py --budget-s 150 --out "$RESULTS" 2>&1 | tee -a "$LOG"
BENCH_RC=$?

echo "== GAT scoring throughput (budget 40 s)" | tee -a "$LOG"
timeout 60 python3 bench/score.py --device cuda --batches 1,16,64,256,1024 --budget-s 40 \
  > "$RESULTS/gat_score_$(date +%Y%m%d).json" 2> >(tee -a "$LOG" >&2)
SCORE_RC=$?
echo "bench exit codes $BENCH_RC/$SCORE_RC; device_check done in $((SECONDS - START)) s" \
  | tee -a "$LOG"

if [ -n "${OUT:-}" ]; then
  cp "$LOG" "$OUT/"
  find "$RESULTS" \( -name 'gpu_bench_*.json' -o -name 'gat_score_*.json' \) -newer "$MARK" \
    -exec cp {} "$OUT/" \;
fi
exit $((TESTS_RC != 0 || BENCH_RC != 0))
