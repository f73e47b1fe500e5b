#!/usr/bin/env bash
# Configures the build folder (default: build/) and prints its name. It builds what this machine
# can run: without a GPU (no nvidia-smi, or one that lists none) a CPU-only build; with one, the
# CUDA backend for that GPU's architecture alone (nvidia-smi's compute_cap, e.g. 9.0 -> 90), so a
# first build compiles the CUDA kernels once instead of for every architecture. The user decides
# otherwise: LOOM_CUDA=OFF (no CUDA), LOOM_CUDA=ON (CUDA even without a GPU: for the GPU present,
# else CMake's default list "80;90"), LOOM_CUDA_ARCHITECTURES="80;90" (those architectures; the
# full build). LOOM_WERROR=ON makes compiler warnings errors (CI does). Extra arguments go to cmake
# as they are (scripts/sanitize.sh passes -DLOOM_SANITIZE=... this way). Leaves out: choosing the
# compiler (CC/CXX from the environment) and the build type (always Release).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LOOM_BUILD_DIR:-build}
args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release)
if [ "${LOOM_CUDA:-}" != OFF ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# The compute capabilities of this machine's GPUs as CMake architectures ("90", "80;90"); empty
# without a GPU, or when nvidia-smi cannot say (a driver older than compute_cap: CMake's "native").
gpu_architectures() {
  command -v nvidia-smi >/dev/null || return 0
  local caps
  [ -n "$(nvidia-smi -L 2>/dev/null | grep '^GPU ' || true)" ] || return 0
  caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d '. ' |
         sort -u | paste -sd ';') || caps=""
  if [[ "$caps" =~ ^[0-9]+(\;[0-9]+)*$ ]]; then echo "$caps"; else echo native; fi
}
# LOOM_CUDA is always passed, so a build folder configured before without CUDA gets it back.
if [ -n "${LOOM_CUDA_ARCHITECTURES:-}" ] && [ -z "${LOOM_CUDA:-}" ]; then
  LOOM_CUDA=ON
elif [ -z "${LOOM_CUDA_ARCHITECTURES:-}" ] && [ "${LOOM_CUDA:-}" != OFF ]; then
  LOOM_CUDA_ARCHITECTURES=$(gpu_architectures)
  if [ -z "${LOOM_CUDA:-}" ]; then
    if [ -z "$LOOM_CUDA_ARCHITECTURES" ]; then
      LOOM_CUDA=OFF
      echo "configure.sh: no GPU here, so a CPU-only build (LOOM_CUDA=ON or" \
           "LOOM_CUDA_ARCHITECTURES=\"80;90\" compiles the CUDA backend too)" >&2
    elif command -v nvcc >/dev/null; then
      LOOM_CUDA=ON
    else
      LOOM_CUDA=OFF LOOM_CUDA_ARCHITECTURES=""
      echo "configure.sh: a GPU but no nvcc (the CUDA toolkit), so a CPU-only build" >&2
    fi
  fi
fi

# ccache, when installed, makes rebuilds (and builds of other checkouts) fast.
command -v ccache >/dev/null && args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
[ -n "${LOOM_CUDA:-}" ] && args+=(-DLOOM_CUDA="$LOOM_CUDA")
[ -n "${LOOM_WERROR:-}" ] && args+=(-DLOOM_WERROR="$LOOM_WERROR")
[ -n "${LOOM_CUDA_ARCHITECTURES:-}" ] && args+=(-DCMAKE_CUDA_ARCHITECTURES="$LOOM_CUDA_ARCHITECTURES")
cmake "${args[@]}" "$@" >/dev/null
echo "$build"
