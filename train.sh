#!/usr/bin/env bash
# Installs what is missing, builds loom, and trains the default example, train_mlp, on
# Fashion-MNIST (on the GPU if there is one, else on the CPU). Without arguments it is a short run
# (one epoch); arguments go to the example program (e.g. ./train.sh --epochs 10). It builds only
# what this machine runs (scripts/configure.sh): CPU-only without a GPU, else the CUDA backend for
# the GPU present; LOOM_CUDA_ARCHITECTURES="80;90" ./train.sh is the full build.
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
build=$(scripts/configure.sh)
cmake --build "$build" --target train_mlp -j"$(nproc)"
[ $# -eq 0 ] && set -- --epochs 1
exec "$build/examples/train_mlp" "$@"
