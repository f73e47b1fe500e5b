#!/usr/bin/env bash
# gpu-amp.sh: the mixed-precision checks on the GPU machine. Builds loom (sm_90), runs the amp
# tests (autocast, GradScaler, the CUDA kernels against the CPU ones, eager vs graph decisions),
# trains train_cnn for the same epochs in fp32, --amp bf16 and --amp fp16 (and fp16 with
# --cuda-graph) and prints the test accuracies, then the benchmark's bf16 rows next to libtorch's
# with autocast (scripts/bench-compare.sh) and the cnn with channels-last convolutions on and off.
# Prints a summary last; logs go to $OUT.
#   DATA=/path/to/fashion-mnist scripts/gpu-amp.sh     # the idx .gz files (default .data/fashion-mnist)
#   EPOCHS=10 SKIP_BENCH=1 scripts/gpu-amp.sh
. "$(dirname "$0")/gpu-common.sh"
gpu_folders build-gpu
DATA=${DATA:-.data/fashion-mnist}
EPOCHS=${EPOCHS:-10}
SUMMARY=$LOG/amp_summary.txt ROW_WIDTH=36
: > "$SUMMARY"

gpu_build amp_build "train_cnn bench_train test_autograd test_nn test_train test_cuda"
row build "ok ($(elapsed))"

passed() { grep -E '\[  (PASSED|FAILED) ' "$1" | tr '\n' ' '; }
(cd "$BUILD" && ./tests/test_cuda --gtest_filter='CudaAmp*') > "$LOG/amp_test_cuda.log" 2>&1
row "test_cuda CudaAmp* (CudaAmpGraph* too)" "$(passed "$LOG/amp_test_cuda.log")"
(cd "$BUILD" && ./tests/test_train --gtest_filter='AmpStep*') > "$LOG/amp_test_train.log" 2>&1
row "test_train AmpStep*" "$(passed "$LOG/amp_test_train.log")"
(cd "$BUILD" && ./tests/test_autograd --gtest_filter='Autocast*' && ./tests/test_nn --gtest_filter='*GradScaler*:Amp*') > "$LOG/amp_test_cpu.log" 2>&1
row "Autocast*, GradScaler* (CPU)" "$(passed "$LOG/amp_test_cpu.log")"

acc() { grep -oE 'final test accuracy [0-9.]+%' "$1" | grep -oE '[0-9.]+'; }
for mode in off bf16 fp16 fp16-graph; do
  args=(--amp "${mode%-graph}")
  [ "$mode" = fp16-graph ] && args+=(--cuda-graph)
  s=$(date +%s)
  "$BUILD/examples/train_cnn" --epochs "$EPOCHS" --data-dir "$DATA" --workers 4 "${args[@]}" \
    > "$LOG/amp_train_cnn_$mode.log" 2>&1
  tail -n 4 "$LOG/amp_train_cnn_$mode.log"
  row "train_cnn --amp $mode ($EPOCHS ep)" "$(acc "$LOG/amp_train_cnn_$mode.log")% test accuracy, $(grep -E 'ms/step' "$LOG/amp_train_cnn_$mode.log" | tail -1 | grep -oE '[0-9.]+ ms/step'), $(( $(date +%s) - s ))s wall"
done
ref=$(acc "$LOG/amp_train_cnn_off.log")
for mode in bf16 fp16 fp16-graph; do
  a=$(acc "$LOG/amp_train_cnn_$mode.log")
  [ -n "$ref" ] && [ -n "$a" ] && row "  $mode - fp32 (points)" "$(awk -v a="$a" -v r="$ref" 'BEGIN { d = a - r; printf "%+.2f %s", d, (d >= -0.5 ? "ok (within 0.5)" : "BELOW fp32 by more than 0.5") }')"
done
grep -h "amp fp16:" "$LOG/amp_train_cnn_fp16.log" | tail -1

if [ -z "${SKIP_BENCH:-}" ]; then
  for w in mlp cnn wide; do
    "$BUILD/benchmarks/bench_train" --workload "$w" --amp fp16 | tail -1
    "$BUILD/benchmarks/bench_train" --workload "$w" --amp bf16 --cuda-graph | tail -1
  done > "$LOG/amp_bench_extra.log" 2>&1
  # The cnn with autocast's channels-last convolutions on (the default) and off (docs/amp.md).
  for cl in on off; do
    for a in bf16 fp16; do
      echo "channels-last $cl: $("$BUILD/benchmarks/bench_train" --workload cnn --amp "$a" --channels-last "$cl" | tail -1)"
    done
  done >> "$LOG/amp_bench_extra.log" 2>&1
  cat "$LOG/amp_bench_extra.log"
  OUT=$LOG scripts/bench-compare.sh
  grep -E '^(mlp|cnn|wide) +bf16' "$LOG/bench-compare.txt" | while read -r line; do row "bench bf16" "$line"; done
fi

printf '\n== summary (%s)\n' "$(elapsed)"
printf '%s\n' "${summary[@]}"
