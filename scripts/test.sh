#!/usr/bin/env bash
# Install gpurag with its test extras into ./.venv (CPU torch, never a CUDA build) and run pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
  [ -d .venv ] || python3 -m venv .venv
  . .venv/bin/activate
fi
export GPURAG_PROGRESS=0 PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install -q --upgrade pip
# torch is pinned to the CPU build first so that torch-geometric cannot pull a CUDA build.
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev,gnn,ner,viz,serve,formats,distributed]"
# Optional: a real local OpenAI-compatible LLM server for tests/llm (skipped when absent).
bash scripts/install_llm_test_server.sh || echo "LLM test server not installed: tests/llm will skip"
# Optional: headless Chromium for the --explain page test (skipped when absent).
bash scripts/install_test_browser.sh || echo "Chromium not installed: the browser test will skip"
set +e
# Tests marked `slow` (long shared-data contracts) run in CI (.ci/run) and with `-m slow`.
python -m pytest -q -p no:cacheprovider -m "not slow" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
