#!/usr/bin/env bash
# Configures the build folder (default: build/). CUDA is compiled when nvcc is found; set
# LOOM_CUDA_ARCHITECTURES (default "80;90") to choose GPU architectures, LOOM_CUDA=OFF to skip,
# LOOM_WERROR=ON to make compiler warnings errors (CI does). Extra arguments go to cmake as they
# are (scripts/sanitize.sh passes -DLOOM_SANITIZE=... this way).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LOOM_BUILD_DIR:-build}
args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release)
if [ -z "${LOOM_CUDA:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# ccache, when installed, makes rebuilds (and builds of other checkouts) fast.
command -v ccache >/dev/null && args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
[ -n "${LOOM_CUDA:-}" ] && args+=(-DLOOM_CUDA="$LOOM_CUDA")
[ -n "${LOOM_WERROR:-}" ] && args+=(-DLOOM_WERROR="$LOOM_WERROR")
[ -n "${LOOM_CUDA_ARCHITECTURES:-}" ] && args+=(-DCMAKE_CUDA_ARCHITECTURES="$LOOM_CUDA_ARCHITECTURES")
cmake "${args[@]}" "$@" >/dev/null
echo "$build"
