#!/usr/bin/env bash
# gpu-memory-check.sh: the memory work (issue "Memory at scale") on one GPU in one short call:
# builds what it needs (sm_90), runs the CUDA tests of activation checkpointing, the allocator
# and the graph step, the ZeRO tests (a one-rank NCCL group, the partition, a world of one), the
# gpt benchmark with and without --activation-checkpointing, and train_gpt at GPT-2 124M's shape
# on the KJV corpus for a few steps in six memory configurations (plain, activation
# checkpointing, --grad-accum 4, --zero 1, --zero 2, --zero 3 with bf16 units), whose per-rank
# memory report is the figure wanted; the ZeRO-3 and DDP-in-the-graph tests on one NCCL rank. Each part's output lands in $OUT (or build-gpt/logs) as it finishes.
# Needs third_party/ and .data/kjv.txt carried to the GPU machine. Knobs: BUILD, JOBS (16).
. "$(dirname "$0")/gpu-common.sh"
gpu_folders "$HOME/build-gpt" build-gpt/logs

targets="train_gpt bench_train test_cuda test_distributed zero_tool"
gpu_build build "$targets" -DLOOM_LIBTORCH=OFF
stamp "built $targets"

"$BUILD/tests/test_cuda" --gtest_brief=1 \
  --gtest_filter='CudaCheckpoint.*:CudaAllocator.*:CudaGraphStep.*:CudaGraphDDP.*' > "$LOG/test_cuda.txt" 2>&1
stamp "test_cuda: $(grep -E 'PASSED|FAILED|peak above' "$LOG/test_cuda.txt" | tr '\n' ' ')"
"$BUILD/tests/test_distributed" --gtest_brief=1 --gtest_filter='Zero*:Fsdp*' > "$LOG/test_zero.txt" 2>&1
stamp "test_distributed Zero* Fsdp*: $(grep -E 'PASSED|FAILED|SKIPPED' "$LOG/test_zero.txt" | tr '\n' ' ')"

steps=(--steps 10 --repeats 3 --warmup 5)
for mode in "" "--activation-checkpointing"; do
  "$BUILD/benchmarks/bench_train" --workload gpt --amp bf16 $mode "${steps[@]}" > "$LOG/bench$mode.txt" 2>&1
  stamp "gpt bf16 $mode: $(grep -E '^gpt ' "$LOG/bench$mode.txt" | awk '{print $6 " ms/step, peak " $9 " MiB"}')"
done

gpt2="--text .data/kjv.txt --amp bf16 --n-layer 12 --n-head 12 --n-embd 768 --seq-len 1024 \
  --batch-size 16 --max-steps 6 --eval-every 6 --eval-windows 16 --log-every 3"
for extra in "" "--activation-checkpointing" "--grad-accum 4" "--zero 1" "--zero 2" "--zero 3"; do
  name=$(echo "plain$extra" | tr -d ' -')
  timeout -k 5 120 "$BUILD/examples/train_gpt" $gpt2 $extra > "$LOG/train_$name.txt" 2>&1
  stamp "train_gpt $extra (rc $?): $(grep -E 'rank 0:|^step' "$LOG/train_$name.txt" | tr '\n' ' ')"
done
cat "$LOG/summary.txt"
