#!/usr/bin/env bash
# gpu-gpt-check.sh: the GPT work on one GPU in one short call (scripts/gpu-check.sh is the whole
# suite): builds what it needs (sm_90, and the libtorch twin against the installed PyTorch), runs
# the gpt benchmark of loom and of its twin (bf16, GPT-2 124M, B 16, T 1024), the CUDA tests of
# the GPT ops (layer norm, embedding, attention, GELU tanh, the op table), and train_gpt on the
# KJV corpus for a bounded time, most important first, each step's output in $OUT (or
# build-gpt/logs) as it finishes, so a call cut short keeps what ran. Needs third_party/ (cuDNN's
# frontend headers) and .data/kjv.txt (scripts/gpt-corpus.sh) carried to the GPU machine.
# Knobs: BUILD, JOBS (16), STEPS (10), TRAIN_SECONDS (60), TRAIN_ARGS, NCU_SECONDS (300); NCU=1 also
# times every kernel of two timed gpt steps under Nsight Compute, the warm-up left out
# (bench_train --profile-timed; gpu__time_duration to $LOG/ncu-gpt.csv, and with VISION=1
# resnet50's to $LOG/ncu-resnet50.csv; scripts/kernel-breakdown.py FILE --steps 2 sums it per
# kernel class); TORCH=0 skips the
# libtorch twin; VISION=1 adds the resnet50 and vit-b16 rows (eager, and as a graph with
# recomputed activations); CTEST=1 runs every CUDA test through ctest instead of the GPT ones.
. "$(dirname "$0")/gpu-common.sh"
gpu_folders "$HOME/build-gpt" build-gpt/logs

torch_prefix=$(python3 -c "import torch.utils; print(torch.utils.cmake_prefix_path)" 2>/dev/null || true)
torch_flags=(-DLOOM_LIBTORCH="$([ -n "$torch_prefix" ] && echo ON || echo OFF)"
             ${torch_prefix:+-DCMAKE_PREFIX_PATH="$torch_prefix"})
[ "${TORCH:-1}" = 0 ] && torch_prefix=""
targets="train_gpt bench_train test_cuda"
[ -n "$torch_prefix" ] && targets="$targets bench_train_torch"
gpu_build build "$targets" "${torch_flags[@]}"
stamp "built $targets"

steps=(--steps "${STEPS:-10}" --repeats 3 --warmup 5)
"$BUILD/benchmarks/bench_train" --workload gpt --amp bf16 "${steps[@]}" 2>&1 | tee "$LOG/bench-loom.txt"
stamp "loom gpt bf16: $(grep -E '^gpt ' "$LOG/bench-loom.txt" | awk '{print $6 " ms/step, peak " $9 " MiB, first step " $10 " s"}')"
"$BUILD/benchmarks/bench_train" --workload gpt --amp bf16 --cuda-graph "${steps[@]}" 2>&1 | tee "$LOG/bench-loom-graph.txt"
stamp "loom gpt bf16 graph: $(grep -E '^gpt ' "$LOG/bench-loom-graph.txt" | awk '{print $6 " ms/step, peak " $9 " MiB, first step " $10 " s"}')"
"$BUILD/benchmarks/bench_train" --workload gpt --amp bf16 --recompute-activations "${steps[@]}" 2>&1 | tee "$LOG/bench-loom-recomp.txt"
stamp "loom gpt bf16 recomputed: $(grep -E '^gpt ' "$LOG/bench-loom-recomp.txt" | awk '{print $6 " ms/step, peak " $9 " MiB, first step " $10 " s"}')"
"$BUILD/benchmarks/bench_train" --workload gpt --amp bf16 --recompute-activations --cuda-graph "${steps[@]}" 2>&1 | tee "$LOG/bench-loom-recomp-graph.txt"
stamp "loom gpt bf16 recomputed graph: $(grep -E '^gpt ' "$LOG/bench-loom-recomp-graph.txt" | awk '{print $6 " ms/step, peak " $9 " MiB, first step " $10 " s"}')"
if [ -x "$BUILD/benchmarks/libtorch/bench_train_torch" ]; then
  "$BUILD/benchmarks/libtorch/bench_train_torch" --workload gpt --dtype bf16 "${steps[@]}" 2>&1 | tee "$LOG/bench-torch.txt"
  stamp "libtorch gpt bf16: $(grep -E '^gpt ' "$LOG/bench-torch.txt" | awk '{print $6 " ms/step, peak " $9 " MiB"}')"
fi

if [ "${VISION:-0}" = 1 ]; then
  for w in resnet50 vit-b16; do
    for mode in "" "--cuda-graph --recompute-activations"; do
      "$BUILD/benchmarks/bench_train" --workload $w --amp bf16 $mode "${steps[@]}" > "$LOG/bench-$w${mode:+-graph-r}.txt" 2>&1
      stamp "loom $w bf16 $mode: $(grep -E "^$w " "$LOG/bench-$w${mode:+-graph-r}.txt" | awk '{print $6 " ms/step, peak " $9 " MiB"}')"
    done
  done
fi

if [ "${CTEST:-0}" = 1 ]; then
  stamp "ctest -R Cuda: $(scripts/gpu-ctest.sh "$BUILD" "$LOG")"
else
"$BUILD/tests/test_cuda" --gtest_brief=1 --gtest_filter='CudaLayerNorm.*:CudaAttention*:CudaEmbedding*:*embedding*:*attention*:*layer_norm*:*gelu_tanh*:*GeluTanh*:*CrossEntropy*:*cross_entropy*:*Linear*:*linear*:*gelu_mlp*:*Gpt*:*GPT*:CudaRecompute.*:CudaGraphStep.*:CudaGradNorm.*' > "$LOG/test_cuda.txt" 2>&1
stamp "test_cuda (GPT ops): $(grep -E 'PASSED|FAILED' "$LOG/test_cuda.txt" | tr '\n' ' ')"
fi

if [ "${NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
  # The timed steps alone (--profile-timed): kernel-breakdown.py ncu-gpt.csv --steps 2.
  timeout -k 5 "${NCU_SECONDS:-300}" ncu --clock-control none --profile-from-start off \
    --metrics gpu__time_duration.sum --csv "$BUILD/benchmarks/bench_train" --workload gpt \
    --amp bf16 --warmup 1 --steps 2 --repeats 1 --profile-timed \
    > "$LOG/ncu-gpt.csv" 2> "$LOG/ncu-gpt.err"
  stamp "ncu: $(grep -c gpu__time_duration "$LOG/ncu-gpt.csv") kernels timed"
  if [ "${VISION:-0}" = 1 ]; then
    # Without the warm-up, where cuDNN times every convolution algorithm: --steps 2.
    timeout -k 5 "${NCU_SECONDS:-300}" ncu --clock-control none --profile-from-start off \
      --metrics gpu__time_duration.sum --csv "$BUILD/benchmarks/bench_train" --workload resnet50 \
      --amp bf16 --warmup 3 --steps 2 --repeats 1 --profile-timed \
      > "$LOG/ncu-resnet50.csv" 2> "$LOG/ncu-resnet50.err"
    stamp "ncu resnet50: $(grep -c gpu__time_duration "$LOG/ncu-resnet50.csv") kernels timed"
  fi
fi

if [ -f .data/kjv.txt ]; then
  timeout -k 5 "${TRAIN_SECONDS:-60}" "$BUILD/examples/train_gpt" --text .data/kjv.txt --amp bf16 \
    ${TRAIN_ARGS:---n-layer 6 --n-head 6 --n-embd 384 --seq-len 256 --batch-size 64 --lr 1e-3 --warmup 100 --max-steps 1200 --eval-every 300 --eval-windows 512 --sample 300 --prompt "And Jesus said"} \
    > "$LOG/train_gpt.txt" 2>&1
  stamp "train_gpt: $(grep -E '^step|final' "$LOG/train_gpt.txt" | tail -2 | tr '\n' ' ')"
fi
cat "$LOG/summary.txt"
