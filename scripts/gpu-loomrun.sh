#!/usr/bin/env bash
# gpu-loomrun.sh: loomrun on the GPU machine (two GPUs). Builds loomrun, its tests and dist_tool
# with CUDA, runs the launcher tests, then dist_tool's NCCL collectives under
# `loomrun --nproc_per_node gpu`, and times fail-fast with a rank blocked inside an NCCL
# all_reduce: the other rank is killed with -9 and loomrun must exit non-zero within 5 s.
# NCCL's NVLink multicast stays off (loomrun forces NCCL_NVLS_ENABLE=0 for its workers too).
#   scripts/gpu-loomrun.sh            # build folder $BUILD (default build-gpu), logs in $OUT
. "$(dirname "$0")/gpu-common.sh"
gpu_folders "$(pwd)/build-gpu"
gpu_build loomrun-build "loomrun test_launcher launch_worker_tool dist_tool" -DLOOM_BUILD_BENCHMARKS=OFF
LOOMRUN=$BUILD/distributed/launcher/loomrun
TOOL=$BUILD/tests/dist_tool

echo "== test_launcher"
"$BUILD/tests/test_launcher" > "$LOG/test_launcher.log" 2>&1; tests=$?
tail -3 "$LOG/test_launcher.log"

echo "== NCCL collectives under loomrun --nproc_per_node gpu"
LOOM_TEST_BACKEND=nccl timeout 300 "$LOOMRUN" --standalone --nproc_per_node gpu "$TOOL" collectives \
  2>&1 | tee "$LOG/loomrun-nccl.log"
nccl=${PIPESTATUS[0]}

echo "== fail-fast: kill -9 of the last rank while the others wait in an NCCL all_reduce"
# dist_tool's timeout mode: the last rank stops calling collectives (sleeps); the others block in
# all_reduce #4 with a 60 s collective timeout, so only loomrun's fail-fast can end them in time.
LOOM_TEST_BACKEND=nccl LOOM_TEST_TIMEOUT_MS=60000 "$LOOMRUN" --standalone --nproc_per_node gpu \
  "$TOOL" timeout > "$LOG/loomrun-failfast.log" 2>&1 &
lr=$!
last=$(( $(nvidia-smi -L | wc -l) - 1 ))
victim=""
for _ in $(seq 1 300); do  # wait (up to 30 s) for the last rank's process
  for p in $(pgrep -f "dist_tool timeout"); do
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "RANK=$last" && victim=$p
  done
  [ -n "$victim" ] && break
  sleep 0.1
done
sleep 5  # let the others reach all_reduce #4 and block in it
t0=$(date +%s.%N)
kill -9 "$victim"
wait $lr; rc=$?
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')  # no bc on the GPU machine
left=$(pgrep -f "dist_tool timeout" | wc -l)
grep "loomrun:" "$LOG/loomrun-failfast.log"
echo
echo "== summary"
echo "test_launcher           $([ $tests -eq 0 ] && echo ok || echo FAILED)"
echo "nccl collectives        $([ $nccl -eq 0 ] && echo ok || echo FAILED)"
echo "fail-fast (NCCL)        loomrun exit $rc after ${secs} s, $left worker(s) left (want non-zero, < 5 s, 0)"
