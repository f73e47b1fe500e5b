#!/usr/bin/env bash
# gpu-ctest.sh BUILD LOG: every CUDA test of the build folder BUILD through ctest (CTEST_JOBS at
# once, 12 by default), the log and the junit summary into the folder LOG, and one line on stdout:
# the counts and the first failed tests. The GPU scripts (gpu-gpt-check.sh, gpu-recompute-check.sh)
# call it with CTEST=1. Leaves out: building (the caller built test_cuda).
set -u -o pipefail
build=$1
log=$2
(cd "$build" && ctest -j "${CTEST_JOBS:-12}" -R 'Cuda' --timeout 300 \
  --output-junit "$PWD/ctest-cuda.xml" > "$log/ctest_cuda.txt" 2>&1)
python3 "$(dirname "$0")/test_summary.py" "$build/ctest-cuda.xml" > "$log/ctest_summary.txt" 2>&1
echo "$(tail -1 "$log/ctest_summary.txt") $(grep FAILED "$log/ctest_summary.txt" | head -5 | tr '\n' ' ')"
