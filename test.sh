#!/usr/bin/env bash
# Installs what is missing, builds loom with its tests, and runs the whole suite with ctest.
# CUDA tests skip themselves on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
build=$(scripts/configure.sh)
cmake --build "$build" -j"$(nproc)"
cd "$build" && ctest --output-on-failure -j"$(nproc)" "$@"
