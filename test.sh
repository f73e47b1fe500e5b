#!/usr/bin/env bash
# Installs what is missing, builds loom with its tests, and runs the whole suite with ctest.
# Like ./train.sh it builds what this machine runs (scripts/configure.sh): CPU-only without a GPU,
# where the CUDA tests would only skip themselves; LOOM_CUDA=ON or LOOM_CUDA_ARCHITECTURES
# compiles the CUDA sources anyway (CI does, .ci/run). The last line counts passed, failed and
# skipped tests apart (ctest's own summary counts skipped as passed; see scripts/test_summary.py);
# the exit status is non-zero when a test failed. OpenMP's threads sleep while they wait
# (OMP_WAIT_POLICY=passive, unless set): with ctest running two tests at once on two cores, its
# default spin-wait made the small program tests 10 to 30 times slower (docs/ci.md); the threads
# and their synchronisation are the same.
set -euo pipefail
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
cd "$(dirname "$0")"
root=$(pwd)
scripts/install-deps.sh
build=$(scripts/configure.sh)
cmake --build "$build" -j"$(nproc)"
junit="$(cd "$build" && pwd)/ctest-junit.xml"
rm -f "$junit"
rc=0
(cd "$build" && ctest --output-on-failure -j"$(nproc)" --output-junit "$junit" "$@") || rc=$?
python3 "$root/scripts/test_summary.py" "$junit" || rc=1
exit "$rc"
