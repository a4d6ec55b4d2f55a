#!/usr/bin/env bash
# Optional: headless Chromium (Debian's package) for the evidence-page browser test in
# tests/pipeline/test_explain.py, which skips without it. Needs root and apt-get.
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
  command -v "$name" >/dev/null 2>&1 && exit 0
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "no Chromium and no root apt-get: the browser test will skip" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium
