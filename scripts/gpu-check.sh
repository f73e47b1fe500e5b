#!/usr/bin/env bash
# gpu-check.sh: the one script for the GPU machine. Configures and builds loom for Hopper
# (sm_90, Release, Ninja), prints envinfo, runs every test binary through ctest (the CUDA tests
# included), runs compute-sanitizer memcheck over the CUDA test binary, and racecheck and
# synccheck over the CUDA tests of the kernels that use shared memory, runs every bench_*
# program that exists, and prints a summary table last. Logs go to $OUT (or build-gpu/logs).
# It never changes GPU settings (clocks, modes, MIG); NCCL's NVLink multicast stays off.
#
#   scripts/gpu-check.sh                     # everything
#   SKIP_BENCH=1 scripts/gpu-check.sh        # no benchmarks
#   MEMCHECK_FILTER='-CudaReduce.*' ...      # a gtest filter for the memcheck run (default: all)
#   SKIP_MEMCHECK=1 ...                      # no memcheck (with 2+ GPUs it overlaps ctest anyway)
#   RACECHECK_FILTER=... SYNCCHECK_FILTER=...  # gtest filters for racecheck / synccheck (default:
#                                            # the tests of the shared-memory kernels, SMEM_TESTS)
#   SKIP_RACECHECK=1 SKIP_SYNCCHECK=1 ...    # no racecheck / synccheck
#   SKIP_CTEST=1 ...                         # no ctest run (e.g. only the compute-sanitizer tools)
#   BENCH_ARGS='--quick' ...                 # extra arguments for every bench_* program
#   BENCHES='bench_train' ...                # only these single-process benchmarks (none: BENCHES=-)
#   CTEST_ARGS='-R Cuda' ...                 # extra ctest arguments (a subset of the tests)
#   TARGETS='test_cuda envinfo' ...          # build only these targets (default: everything)
# Other knobs: BUILD (build folder), JOBS (default 16), CTEST_JOBS (default 8), *_TIMEOUT (s).
. "$(dirname "$0")/gpu-common.sh"
ROOT=$(pwd)
gpu_folders "$ROOT/build-gpu"
JOBS=${JOBS:-16}
# Tests that train on Fashion-MNIST find it here (the GPU machine has no Debian dataset package;
# the .gz files are carried into the git-ignored .data/fashion-mnist); without it they skip.
# PCRE2 and utf8proc, which the GPU machine lacks, from .data/gpu-deps (scripts/gpu-deps.sh).
if [ -d "$ROOT/.data/gpu-deps" ]; then
  export LOOM_DEPS_DIR=$ROOT/.data/gpu-deps LD_LIBRARY_PATH=$ROOT/.data/gpu-deps/lib:${LD_LIBRARY_PATH:-}
fi
if [ -z "${FASHION_MNIST_DIR:-}" ] && [ -f "$ROOT/.data/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
  export FASHION_MNIST_DIR=$ROOT/.data/fashion-mnist
fi

SUMMARY=$LOG/summary.txt ROW_WIDTH=28
: > "$SUMMARY"

# ---- configure and build
echo "== configure and build ($BUILD, -j$JOBS)"
gpu_build build "${TARGETS:-}" -DLOOM_BUILD_BENCHMARKS="${BUILD_BENCH:-ON}"
row build "ok ($(elapsed))"

# ---- environment
echo "== envinfo"
"$BUILD/examples/envinfo" 2>&1 | tee "$LOG/envinfo.log"
row envinfo "$([ "${PIPESTATUS[0]}" = 0 ] && echo ok || echo FAILED)"

# ---- memcheck over the CUDA tests (one process: the gtest summary gives skip counts too)
# With two or more GPUs it runs on the last GPU while ctest runs on the first (ctest's NCCL tests
# then skip; the distributed section below runs them on every GPU); with one GPU, after ctest.
have_memcheck() { command -v compute-sanitizer > /dev/null && [ -x "$BUILD/tests/test_cuda" ]; }
run_memcheck() {
  timeout "${MEMCHECK_TIMEOUT:-1500}" compute-sanitizer --tool memcheck --leak-check no --report-api-errors no --error-exitcode 99 \
    "$BUILD/tests/test_cuda" --gtest_filter="${MEMCHECK_FILTER:-*}" > "$LOG/memcheck.log" 2>&1
  echo $? > "$LOG/memcheck.rc"
}
report_memcheck() {
  echo "== compute-sanitizer memcheck"
  if ! have_memcheck; then row "memcheck" "not run (no compute-sanitizer or no test_cuda)"; return; fi
  rc=$(cat "$LOG/memcheck.rc" 2>/dev/null || echo "?")
  tail -n 8 "$LOG/memcheck.log"
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$LOG/memcheck.log" | grep -oE '[0-9]+$' | tail -1)
  passed=$(grep -oE '\[  PASSED  \] [0-9]+' "$LOG/memcheck.log" | grep -oE '[0-9]+$' || echo 0)
  skipped=$(grep -oE '\[  SKIPPED \] [0-9]+' "$LOG/memcheck.log" | grep -oE '[0-9]+$' || echo 0)
  gfailed=$(grep -oE '[0-9]+ FAILED TEST' "$LOG/memcheck.log" | grep -oE '^[0-9]+' || echo 0)
  [ "$rc" = 124 ] && errors="timed out after ${MEMCHECK_TIMEOUT:-1500} s"
  row "memcheck errors" "${errors:-?} (exit $rc)"
  row "  test_cuda under memcheck" "$passed passed, $gfailed failed, $skipped skipped"
}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
memcheck_pid=""
if [ -z "${SKIP_MEMCHECK:-}" ] && have_memcheck && [ "${ngpu:-0}" -ge 2 ]; then
  echo "== memcheck on GPU $((ngpu - 1)), in the background"
  CUDA_VISIBLE_DEVICES=$((ngpu - 1)) run_memcheck &
  memcheck_pid=$!
  export CUDA_VISIBLE_DEVICES=0  # ctest on the first GPU
fi

# ---- every test, through ctest
if [ -n "${SKIP_CTEST:-}" ]; then
  row ctest "skipped (SKIP_CTEST)"
else
  echo "== ctest"
  # shellcheck disable=SC2086
  (cd "$BUILD" && timeout "${CTEST_TIMEOUT:-1200}" ctest -j "${CTEST_JOBS:-8}" --timeout 300 --output-on-failure \
    --output-junit "$LOG/ctest-junit.xml" ${CTEST_ARGS:-}) > "$LOG/ctest.log" 2>&1
  tail -n 25 "$LOG/ctest.log"
  # "N% tests passed, K tests failed out of T", or (CMake 4) "100% tests passed out of T"
  total=$(grep -oE 'tests (passed|failed) out of [0-9]+' "$LOG/ctest.log" | tail -n 1 | grep -oE '[0-9]+$' || echo "?")
  failed=$(grep -oE '[0-9]+ tests failed out of' "$LOG/ctest.log" | grep -oE '^[0-9]+' ||
    { grep -q '100% tests passed' "$LOG/ctest.log" && echo 0; } || echo "?")
  cuda_lines=$(grep -E 'Test +#[0-9]+: [A-Za-z/]*Cuda' "$LOG/ctest.log")
  cuda_tests=$(grep -c . <<< "$cuda_lines" || true)
  cuda_failed=$(grep -cE '\*\*\*(Failed|Timeout|Exception)' <<< "$cuda_lines" || true)
  cuda_skipped=$(grep -cE '\*\*\*(Skipped|Not Run)' <<< "$cuda_lines" || true)
  row "ctest (all binaries)" "$failed failed of $total"
  row "  passed/failed/skipped" "$(python3 "$ROOT/scripts/test_summary.py" "$LOG/ctest-junit.xml" | tail -n 1)"
  row "  of which CUDA tests" "$cuda_failed failed, $cuda_skipped skipped of $cuda_tests"
fi

unset CUDA_VISIBLE_DEVICES
if [ -n "${SKIP_MEMCHECK:-}" ]; then
  row memcheck "skipped (SKIP_MEMCHECK)"
else
  if [ -n "$memcheck_pid" ]; then wait "$memcheck_pid"; elif have_memcheck; then run_memcheck; fi
  report_memcheck
fi

# ---- racecheck and synccheck: shared-memory hazards and __syncthreads misuse in the kernels
# that use shared memory (reductions, softmax/loss, norms). Both tools run kernels far more
# slowly than memcheck, hence the filter; each run is bounded by *_TIMEOUT (default 900 s).
SMEM_TESTS='CudaReduce.*:CudaSoftmax.*:CudaLoss.*:CudaFusedCrossEntropy.*:CudaNllIgnoreClass.*:CudaBatchNorm.*:CudaBatchNormPool.*:CudaChannelsLast.*:CudaAutograd.*'
run_cs_tool() {  # tool, filter, timeout
  local tool=$1 filter=$2 limit=$3 t rc errors passed skipped
  echo "== compute-sanitizer $tool ($filter)"
  if ! have_memcheck; then row "$tool" "not run (no compute-sanitizer or no test_cuda)"; return; fi
  t=$(date +%s)
  timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 99 \
    "$BUILD/tests/test_cuda" --gtest_filter="$filter" > "$LOG/$tool.log" 2>&1
  rc=$?
  tail -n 6 "$LOG/$tool.log"
  errors=$(grep -oE '(ERROR|RACECHECK|SYNCCHECK) SUMMARY: [0-9]+' "$LOG/$tool.log" | grep -oE '[0-9]+$' | tail -1)
  passed=$(grep -oE '\[  PASSED  \] [0-9]+' "$LOG/$tool.log" | grep -oE '[0-9]+$' || echo 0)
  skipped=$(grep -oE '\[  SKIPPED \] [0-9]+' "$LOG/$tool.log" | grep -oE '[0-9]+$' || echo 0)
  [ "$rc" = 124 ] && errors="timed out after $limit s"
  row "$tool errors" "${errors:-?} (exit $rc, $(( $(date +%s) - t )) s)"
  row "  test_cuda under $tool" "$passed passed, $skipped skipped"
}
[ -z "${SKIP_RACECHECK:-}" ] && run_cs_tool racecheck "${RACECHECK_FILTER:-$SMEM_TESTS}" "${RACECHECK_TIMEOUT:-900}"
[ -z "${SKIP_SYNCCHECK:-}" ] && run_cs_tool synccheck "${SYNCCHECK_FILTER:-$SMEM_TESTS}" "${SYNCCHECK_TIMEOUT:-900}"

# ---- distributed: NCCL across two GPUs (one process each), and all_reduce bus bandwidth
if [ "${ngpu:-0}" -ge 2 ] && [ -x "$BUILD/tests/test_distributed" ]; then
  echo "== distributed (NCCL, 2 processes)"
  timeout 600 "$BUILD/tests/test_distributed" --gtest_filter='Nccl.*' > "$LOG/distributed.log" 2>&1
  rc=$?
  tail -n 20 "$LOG/distributed.log"
  dpassed=$(grep -oE '\[  PASSED  \] [0-9]+' "$LOG/distributed.log" | grep -oE '[0-9]+$' || echo 0)
  dskipped=$(grep -oE '\[  SKIPPED \] [0-9]+' "$LOG/distributed.log" | grep -oE '[0-9]+$' || echo 0)
  row "NCCL tests (2 GPUs)" "$dpassed passed, $dskipped skipped (exit $rc)"
  row "  NCCL timeout error" "$(grep -m1 -oE 'after [0-9.]+ s: all_reduce #4.*reached it' "$LOG/distributed.log" | cut -c1-150)"
  row "  NCCL op after the abort" "$(grep -m1 -oE 'next op after [0-9.]+ s' "$LOG/distributed.log")"
  if [ -z "${SKIP_BENCH:-}" ] && [ -x "$BUILD/benchmarks/bench_allreduce" ]; then
    echo "== bench_allreduce --nproc 2 --backend nccl"
    timeout 600 "$BUILD/benchmarks/bench_allreduce" --nproc 2 --backend nccl \
      > "$LOG/bench_allreduce.log" 2>&1
    row "bench_allreduce (nccl x2)" "exit $?"
    cat "$LOG/bench_allreduce.log"
    # size(B) count time(us) algbw busbw -> one summary row per size
    while read -r bytes _ us _ busbw; do
      row "  busbw $bytes B" "$busbw GB/s ($us us)"
    done < <(grep -E '^ +[0-9]+ ' "$LOG/bench_allreduce.log")
  fi
else
  row "NCCL tests (2 GPUs)" "not run ($ngpu GPU(s))"
fi

# ---- benchmarks
if [ -z "${SKIP_BENCH:-}" ]; then
  : > "$LOG/bench.log"
  for b in "$BUILD"/benchmarks/bench_*; do
    [ -x "$b" ] || continue
    name=$(basename "$b")
    [ "$name" = bench_allreduce ] && continue  # multi-process: run in the distributed section
    [ -n "${BENCHES:-}" ] && ! grep -qw "$name" <<< "$BENCHES" && continue
    echo "== $name ${BENCH_ARGS:-}"
    echo "== $name ${BENCH_ARGS:-}" >> "$LOG/bench.log"
    # shellcheck disable=SC2086
    timeout "${BENCH_TIMEOUT:-600}" "$b" ${BENCH_ARGS:-} 2>&1 | tee -a "$LOG/bench.log" | tail -n 30
    row "$name" "exit ${PIPESTATUS[0]}"
  done
else
  row benchmarks "skipped (SKIP_BENCH)"
fi

# ---- summary
echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), total $(elapsed))"
printf '%s\n' "${summary[@]}"
