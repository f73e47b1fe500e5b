#!/usr/bin/env bash
# gpu-recompute-check.sh: recomputed activations (Note [Recomputed activations],
# autograd/recompute.h) on one GPU in one call: builds test_cuda and bench_train (sm_90), runs the
# CudaRecompute tests (batch_norm_apply bit for bit; ResNet-50 and a GPT with and without, peak
# lower), then the benchmark rows with and without --recompute-activations (resnet50 and vit-b16
# eager and as a CUDA graph, gpt eager; bf16 autocast), then the CUDA tests of the rest of what the
# change touches (batch norm, GELU, Linear, the models). Each part's output lands in $OUT (or
# build-recompute/logs) as it finishes; summary.txt has one line per part.
# Knobs: BUILD, JOBS (16), STEPS (10), CTEST=1 (every CUDA test through ctest), CTEST_JOBS (12).
. "$(dirname "$0")/gpu-common.sh"
gpu_folders "$HOME/build-recompute" build-recompute/logs

gpu_build build "test_cuda bench_train"
stamp "built test_cuda bench_train"

"$BUILD/tests/test_cuda" --gtest_filter='CudaRecompute.*' > "$LOG/test_recompute.txt" 2>&1
stamp "CudaRecompute.*: $(grep -E 'PASSED|FAILED|peak:' "$LOG/test_recompute.txt" | tr '\n' ' ')"

steps=(--steps "${STEPS:-10}" --repeats 3 --warmup 3)
bench() {  # workload, then bench_train's extra flags
  local w=$1 name
  shift
  name="$w$(echo "$*" | tr -d ' -')"
  "$BUILD/benchmarks/bench_train" --workload "$w" --amp bf16 "$@" "${steps[@]}" > "$LOG/bench_$name.txt" 2>&1
  stamp "$w bf16 $*: $(grep -E "^$w " "$LOG/bench_$name.txt" | awk '{print $4 " " $6 " ms/step, peak " $9 " MiB"}') $(grep -i error "$LOG/bench_$name.txt" | head -2)"
}
for w in resnet50 vit-b16; do
  bench $w
  bench $w --recompute-activations
  bench $w --cuda-graph
  bench $w --cuda-graph --recompute-activations
done
bench gpt
bench gpt --recompute-activations

# The CUDA tests of what the change touches (batch norm, GELU and Linear through the op table, the
# image models, checkpointing), in one process; CTEST=1 runs every CUDA test through ctest instead.
if [ "${CTEST:-0}" = 1 ]; then
  stamp "ctest -R Cuda: $(scripts/gpu-ctest.sh "$BUILD" "$LOG")"
else
  filter='*CudaOpTable*:CudaBatchNorm*:CudaVisionModels.*:CudaCheckpoint.*:CudaLinearFused.*:CudaChannelsLast.*:CudaAmp*:CudaElementwise.*:CudaGraphStep.*:CudaAutograd.*'
  "$BUILD/tests/test_cuda" --gtest_brief=1 --gtest_filter="$filter" > "$LOG/test_touched.txt" 2>&1
  stamp "test_cuda $filter: $(grep -E 'PASSED|FAILED' "$LOG/test_touched.txt" | tr '\n' ' ')"
fi
cat "$LOG/summary.txt"
