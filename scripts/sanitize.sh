#!/usr/bin/env bash
# sanitize.sh: builds the CPU-only test suite with clang under sanitizers and runs it.
#   scripts/sanitize.sh asan   # AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/): the
#                              # CPU test binaries, the fuzz harnesses' short runs and replays
#   scripts/sanitize.sh tsan   # ThreadSanitizer (build-tsan/): the multi-threaded parts (data
#                              # loader, TCP store, Gloo process groups, DDP, loomrun); the tests
#                              # in which a Gloo peer dies mid-collective in a second group, with
#                              # one suppression more (TSAN_PEER_FAILURE_TESTS)
#   scripts/sanitize.sh        # both
#   scripts/sanitize.sh ci     # what CI runs (.ci/run): ASan+UBSan over every CPU test binary
#                              # but test_cuda (the multi-process ones with their real worker
#                              # processes) and the fuzz harnesses' short runs and replays, then
#                              # the whole TSan half
# Knobs: JOBS (build and ctest parallelism, default nproc), ASAN_TARGETS / TSAN_TARGETS (what to
# build), ASAN_TESTS / TSAN_TESTS / TSAN_PEER_FAILURE_TESTS (ctest -R regular expressions). Any
# sanitizer report fails the test it happens in (halt_on_error / -fno-sanitize-recover), and the
# run: every process writes its reports to <build>/sanitizer-logs/ too (log_path), so a report in a worker process whose
# exit code a test expected to be non-zero is not lost. Timings: docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# The tests that read committed fixtures (tokenizers, Hugging Face folders) find them through
# LOOM_SOURCE_DIR, which ctest sets; the whole-binary runs below need it too.
export LOOM_SOURCE_DIR=$root
what=${1:-all}
jobs=${JOBS:-$(nproc)}
export CC=clang CXX=clang++

# ASan + UBSan: every CPU test binary (no CUDA), plus the fuzz harnesses.
ASAN_TARGETS=${ASAN_TARGETS:-"test_core test_kernels test_autograd test_nn test_data test_distributed
  test_train test_examples test_launcher dist_tool ddp_tool launch_worker_tool loomrun train_mlp
  train_cnn safetensors_fuzz checkpoint_fuzz idx_fuzz store_protocol_fuzz flags_fuzz tokenizer_fuzz
  safetensors_fuzz_replay checkpoint_fuzz_replay idx_fuzz_replay store_protocol_fuzz_replay
  flags_fuzz_replay tokenizer_fuzz_replay"}
# Everything but the Python interop tests and the lint (no C++ under test there), and the
# binaries not built here (test_cuda: the CPU-only build has no CUDA code to check).
ASAN_TESTS=${ASAN_TESTS:-"."}
ASAN_EXCLUDE=${ASAN_EXCLUDE:-"python_interop|python_read|lint_self_test|example_programs_bad_inputs|_NOT_BUILT"}
# TSan: the binaries with threads of their own or many processes talking.
TSAN_TARGETS=${TSAN_TARGETS:-"test_data test_distributed dist_tool ddp_tool test_launcher
  launch_worker_tool loomrun"}
TSAN_TESTS=${TSAN_TESTS:-"(DataLoader\.|TCPStore\.|StoreToken\.|StoreBind\.|Gloo|DDP|ProcessGroup\.|CompletionWork\.|Loomrun|WorkerProcess\.)"}
# The tests in which a Gloo peer dies or stops mid-collective run with one suppression more
# (scripts/sanitizers/tsan-peer-failure.supp: a false report from inside Gloo's unwinding when a
# collective fails while a peer's data arrives); every other test runs with tsan.supp alone.
TSAN_PEER_FAILURE_TESTS=${TSAN_PEER_FAILURE_TESTS:-"(Gloo\.ARankThatStopsIsNamedInTheTimeoutError|Gloo\.ARankKilledMidCollectiveIsNamedByItsHeartbeat|Gloo\.ADeadPeerFailsTheOthersAtOnce|Gloo\.ARankThatCallsDestroyProcessGroupIsNamedByTheOthers|Gloo\.ARankThatExitsWithTheGroupUpIsNamedByTheOthers|LoomrunGloo\.AWorkerThatEndsEarlyIsNamedThroughTheLaunchersRecord|LoomrunGloo\.KillNineDuringACollective|LoomrunNodes\.)"}

configure() {  # build folder, sanitizer list, extra cmake args...
  local dir=$1 san=$2
  shift 2
  # -O1: sanitizer builds compile twice as fast as -O3 and still inline enough to run quickly.
  # Warnings are errors here as in the main build (LOOM_WERROR=ON): clang warns about things GCC
  # does not, so a new clang warning fails CI instead of scrolling by. (UBSan's checks keep clang
  # from vectorising `omp simd` loops: cmake/LoomOptions.cmake turns that one warning off there.)
  # No OpenBLAS: its OpenMP build links GCC's OpenMP runtime, which must not meet clang's libomp
  # in one process, and its code is not instrumented; Eigen's GEMM (the reference) runs instead.
  # The library compiles as a unity build, batches of 8 files (cmake/LoomUnity.cmake: each header
  # parsed once a batch; the CPU it saves is in docs/ci.md); the tests and programs file by file.
  LOOM_BUILD_DIR=$dir LOOM_CUDA=OFF LOOM_CUDA_ARCHITECTURES="" LOOM_WERROR=ON scripts/configure.sh \
    -DLOOM_BUILD_BENCHMARKS=OFF -DLOOM_OPENBLAS=OFF -DLOOM_SANITIZE="$san" "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" \
    -DLOOM_UNITY_BUILD=ON -DLOOM_UNITY_BATCH=8 "$@" > /dev/null
}

run_ctest() {  # build folder, include regex, exclude regex
  (cd "$1" && ctest --output-on-failure -j"$jobs" --timeout 900 -R "$2" ${3:+-E "$3"})
}

# TSAN_OPTIONS for one run: the common options with the given suppressions file.
tsan_options() {  # suppressions file
  echo "halt_on_error=1:second_deadlock_stack=1:suppressions=$1:log_path=$root/build-tsan/sanitizer-logs/tsan"
}

# A fresh <build>/sanitizer-logs/ for the reports of every process of the run (log_path=).
fresh_logs() {
  rm -rf "$root/$1/sanitizer-logs"
  mkdir -p "$root/$1/sanitizer-logs"
}

# Records a stage's wall time and CPU seconds for .ci/run's table (when it asks:
# LOOM_STAGE_TIMES names the file).
stage_time() {  # name seconds [CPU seconds]
  [ -n "${LOOM_STAGE_TIMES:-}" ] && printf '%s\t%d\t%s\n' "$1" "$2" "${3:-}" >> "$LOOM_STAGE_TIMES"
  return 0
}
# The CPU seconds (user + system) of this script's finished children so far.
cpu_seconds() {
  local stat
  stat=$(cat /proc/$$/stat 2>/dev/null) || { echo 0; return; }
  stat=${stat##*) }  # the fields after the command's name
  # shellcheck disable=SC2086
  set -- $stat
  echo $(( (${14} + ${15}) / $(getconf CLK_TCK) ))  # cutime, cstime
}

# Runs test binaries whole, $jobs at a time (each a process of its own, as ctest -j runs tests of
# several binaries at once), each one's output into <build>/<binary>.log; prints a line per binary
# as it ends, and its whole log when it failed. Returns 1 if any failed.
run_binaries_whole() {  # build folder, label, binaries...
  local dir=$1 label=$2 b rc=0
  shift 2
  for b in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || rc=1; done
    run_binary_whole "$dir" "$label" "$b" &
  done
  while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || rc=1; done
  return "$rc"
}
run_binary_whole() {  # build folder, label, binary
  local t0 rc=0
  t0=$(date +%s)
  (cd "$1" && "./tests/$3") > "$1/$3.log" 2>&1 || rc=1
  [ "$rc" = 0 ] || cat "$1/$3.log"
  echo "== $2: $3 $(( $(date +%s) - t0 )) s, $(grep -hE '^\[  (PASSED|FAILED)  \]' "$1/$3.log" | tr '\n' ' ')"
  return "$rc"
}

# Fails (returns 1) if any process of the run wrote a report, printing them.
check_logs() {  # build folder
  local logs=("$root/$1/sanitizer-logs"/*)
  [ -e "${logs[0]}" ] || return 0
  echo "== $1: sanitizer reports of $((${#logs[@]})) process(es):"
  cat "${logs[@]}"
  return 1
}

if [ "$what" = ci ]; then
  # Only what runs below: the binaries, the worker programs they start (test_examples starts
  # train_mlp under loomrun, and train_cnn, which building test_examples builds too) and the fuzz
  # harnesses with their replays.
  ASAN_TARGETS="test_core test_kernels test_autograd test_nn test_data test_train test_distributed
    test_examples test_launcher dist_tool ddp_tool launch_worker_tool loomrun train_mlp
    safetensors_fuzz checkpoint_fuzz idx_fuzz store_protocol_fuzz flags_fuzz tokenizer_fuzz
    safetensors_fuzz_replay checkpoint_fuzz_replay idx_fuzz_replay store_protocol_fuzz_replay
    flags_fuzz_replay tokenizer_fuzz_replay"
  ASAN_TESTS="^fuzz_"     # the fuzz short runs and replays through ctest, and these binaries whole
  # The longest first (CI, 2026-12-02: test_examples 59 s, test_distributed 35 s, test_kernels and
  # test_launcher 21 s, the rest 2-12 s), so that two at a time finish together.
  ASAN_BINARIES="test_examples test_distributed test_kernels test_launcher test_data test_train
    test_core test_autograd test_nn"
  # Under ASan three train_gpt program runs took 407 of test_examples' 490 s (CI, 2026-12-02:
  # 200 steps 211 s, kill and resume 155 s, two Gloo processes 41 s); the optimised build runs
  # them, and the ops and loop they drive run under ASan in the other binaries.
  # So do the later ones of the same kind: --zero 2 against one process and its resume (four
  # runs) and the out-of-memory exit (its memory limit is measured on the optimised build).
  ASAN_GTEST_FILTER="-TrainGpt.TwoHundredSteps*:TrainGpt.KilledAndResumed*:TrainGpt.TwoGloo*"
  ASAN_GTEST_FILTER="$ASAN_GTEST_FILTER:TrainGpt.ZeroTwo*:OutOfMemoryExit.*"
  # and ZeRO's byte counts (seven jobs of 1-3 processes; the other ZeRO jobs run the same code).
  ASAN_GTEST_FILTER="$ASAN_GTEST_FILTER:ZeroGloo.StateAndGradientBytesPerRankAreOneNth"
  # and train_cnn's ResNet-18 and ViT runs (CI, 2026-12-03: 122 and 41 s of test_examples' 334 s
  # under ASan; SyncBatchNorm's sums and the models' ops run under ASan in test_nn).
  ASAN_GTEST_FILTER="$ASAN_GTEST_FILTER:TrainCnnModels.*"
  # and train_gpt's layouts (--tp, --pp, with ZeRO: 20 runs of 1-4 processes); parallelize's kinds
  # run under ASan in test_distributed (Parallelize.*, one process) and the tp and pp layers in its
  # TensorParallel and PipelineGloo jobs.
  ASAN_GTEST_FILTER="$ASAN_GTEST_FILTER:TrainGpt.TensorParallel*:TrainGpt.PipelineParallel*"
  # and the longest program runs left (CI, 2026-12-05: 137, 51, 35 and 27 s of test_examples' 363
  # s under ASan): train_bert's pretraining and fine-tuning and its kill and resume, train_gpt
  # with a BPE tokenizer and with --grad-accum 2. BERT's model and loss run under ASan in test_nn,
  # its masking in test_data, the BPE tokenizer in test_data and gradient accumulation in
  # test_train; train_bert's and train_gpt's short runs (two processes, the refusals) stay here.
  ASAN_GTEST_FILTER="$ASAN_GTEST_FILTER:TrainBert.Pretraining*:TrainBert.KilledAndResumed*"
  ASAN_GTEST_FILTER="$ASAN_GTEST_FILTER:TrainGpt.ABpeTokenizer*:TrainGpt.GradAccum*"
  what=all
fi
case $what in asan | tsan | all) ;; *) echo "sanitize.sh: unknown mode '$what' (asan, tsan, all, ci)" >&2; exit 2 ;; esac

rc=0
if [ "$what" = asan ] || [ "$what" = all ]; then
  t0=$(date +%s) c0=$(cpu_seconds)
  echo "== ASan+UBSan: build (build-asan)"
  configure build-asan address,undefined -DLOOM_FUZZ=ON
  # shellcheck disable=SC2086
  cmake --build build-asan -j"$jobs" --target $ASAN_TARGETS ||
    { stage_time "ASan+UBSan build (failed)" $(( $(date +%s) - t0 )) $(( $(cpu_seconds) - c0 )); exit 1; }
  t1=$(date +%s) c1=$(cpu_seconds)
  echo "== ASan+UBSan: tests"
  fresh_logs build-asan
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1:log_path=$root/build-asan/sanitizer-logs/asan
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$root/scripts/sanitizers/ubsan.supp:log_path=$root/build-asan/sanitizer-logs/ubsan
  run_ctest build-asan "$ASAN_TESTS" "$ASAN_EXCLUDE" || rc=1
  GTEST_FILTER="${ASAN_GTEST_FILTER:-*}" run_binaries_whole build-asan "ASan+UBSan" ${ASAN_BINARIES:-} ||
    rc=1
  check_logs build-asan || rc=1
  stage_time "ASan+UBSan build" $((t1 - t0)) $((c1 - c0))
  stage_time "ASan+UBSan tests" $(( $(date +%s) - t1 )) $(( $(cpu_seconds) - c1 ))
  echo "== ASan+UBSan: build $((t1 - t0)) s, tests $(( $(date +%s) - t1 )) s"
fi
if [ "$what" = tsan ] || [ "$what" = all ]; then
  t0=$(date +%s) c0=$(cpu_seconds)
  echo "== TSan: build (build-tsan)"
  configure build-tsan thread
  # shellcheck disable=SC2086
  cmake --build build-tsan -j"$jobs" --target $TSAN_TARGETS ||
    { stage_time "TSan build (failed)" $(( $(date +%s) - t0 )) $(( $(cpu_seconds) - c0 )); exit 1; }
  t1=$(date +%s) c1=$(cpu_seconds)
  echo "== TSan: tests"
  # OpenMP: clang's libomp with its TSan tool (libarcher) so that TSan sees OpenMP's barriers.
  archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | head -1 || true)
  [ -n "$archer" ] && export OMP_TOOL_LIBRARIES=$archer
  fresh_logs build-tsan
  # Every test but the peer-failure ones with tsan.supp alone; then those with both files.
  TSAN_OPTIONS=$(tsan_options "$root/scripts/sanitizers/tsan.supp")
  export TSAN_OPTIONS
  run_ctest build-tsan "$TSAN_TESTS" "$TSAN_PEER_FAILURE_TESTS" || rc=1
  cat scripts/sanitizers/tsan.supp scripts/sanitizers/tsan-peer-failure.supp > build-tsan/tsan-peer-failure.supp
  TSAN_OPTIONS=$(tsan_options "$root/build-tsan/tsan-peer-failure.supp")
  echo "== TSan: the peer-failure tests (scripts/sanitizers/tsan-peer-failure.supp added)"
  run_ctest build-tsan "$TSAN_PEER_FAILURE_TESTS" "" || rc=1
  check_logs build-tsan || rc=1
  stage_time "TSan build" $((t1 - t0)) $((c1 - c0))
  stage_time "TSan tests" $(( $(date +%s) - t1 )) $(( $(cpu_seconds) - c1 ))
  echo "== TSan: build $((t1 - t0)) s, tests $(( $(date +%s) - t1 )) s"
fi
exit $rc
