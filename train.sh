#!/usr/bin/env bash
# Installs what is missing, builds loom, and trains the default example (on the GPU if there is
# one, else on the CPU). Extra arguments go to the example program.
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
build=$(scripts/configure.sh)
example=train_mlp
[ -f examples/train_mlp.cpp ] || example=fit_curve
cmake --build "$build" --target "$example" -j"$(nproc)"
exec "$build/examples/$example" "$@"
