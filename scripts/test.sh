#!/usr/bin/env bash
# Install gpurag with its test extras into ./.venv (CPU torch, never a CUDA build) and run pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
  [ -d .venv ] || python3 -m venv .venv
  . .venv/bin/activate
fi
export GPURAG_PROGRESS=0 PIP_DISABLE_PIP_VERSION_CHECK=1
# Optional: headless Chromium for the --explain page test (skipped when absent). apt-get runs in
# the background while pip installs into .venv (the two never touch the same files).
# If this script stops early (set -e), the EXIT trap stops that install (its whole process
# group, where setsid gives it one) and removes its log.
browser_log=$(mktemp)
stop_browser_install() {
  if [ -n "${browser_pid:-}" ] && kill -0 "$browser_pid" 2>/dev/null; then
    kill -TERM -- "-$browser_pid" 2>/dev/null || kill -TERM "$browser_pid" 2>/dev/null || true
    wait "$browser_pid" 2>/dev/null || true
  fi
  rm -f "$browser_log"
}
trap stop_browser_install EXIT
if command -v setsid >/dev/null 2>&1; then
  setsid bash scripts/install_test_browser.sh >"$browser_log" 2>&1 &
else
  bash scripts/install_test_browser.sh >"$browser_log" 2>&1 &
fi
browser_pid=$!
# pip's own upgrade stays: the bundled pip of Python 3.11 skips extras whose names it does not
# normalize (lxml[html_clean], needed by trafilatura's justext).
python -m pip install -q --upgrade pip
# One resolution: torch pinned to 2.13.0 (the CPU build, a local wheel) together with the
# extras, so that torch-geometric cannot pull a CUDA build.
# Byte-compiling the ~16k installed modules is most of pip's CPU time, on one core: pip skips it
# and compileall writes the same .pyc files on every core.
python -m pip install -q --no-compile "torch==2.13.0" -e ".[dev,gnn,ner,viz,serve,formats,distributed]"
cuda=$(python -c 'import torch; print(torch.version.cuda or "")')
if [ -n "$cuda" ]; then
  echo "scripts/test.sh: the torch in $(python -c 'import sys; print(sys.prefix)') is a CUDA" \
    "build (CUDA $cuda); this script installs and tests the CPU build: remove that torch and rerun" >&2
  exit 1
fi
python -m compileall -q -j 0 "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
  >/dev/null 2>&1 || true  # a module that does not compile is one pip would skip as well
# Optional: a real local OpenAI-compatible LLM server for tests/llm (skipped when absent).
bash scripts/install_llm_test_server.sh || echo "LLM test server not installed: tests/llm will skip"
if ! wait "$browser_pid"; then
  cat "$browser_log" >&2
  echo "Chromium not installed: the browser test will skip"
fi
browser_pid=
rm -f "$browser_log"
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
