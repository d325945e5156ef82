#!/usr/bin/env bash
# Installs everything kerneltraj needs on a fresh machine (CPU is fine): the Python package with
# its pinned dependencies, the test extras, and Debian's Chromium for the browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -q -e ".[dev]"
# flashinfer-bench's schema validates our exported traces; its own dependencies would pull CUDA
# wheels, and the schema needs none of them.
python3 -m pip install -q --no-deps "flashinfer-bench==0.1.2" "safetensors>=0.4"
if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "note: Chromium is missing; browser tests will be skipped (apt-get install chromium)" >&2
  fi
fi
