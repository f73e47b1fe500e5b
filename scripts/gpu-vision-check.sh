#!/usr/bin/env bash
# gpu-vision-check.sh: the image models (issue "ResNet and ViT") on one GPU in one call: builds
# what it needs (sm_90), runs their CUDA tests (CudaVision.*: ResNets and the ViT against the
# CPU), the resnet50 and vit-b16 benchmark rows (bf16 autocast, eager and --cuda-graph), then
# the Fashion-MNIST accuracy runs the README quotes, side by side on the one GPU: ResNet-18 and
# the small ViT (train_cnn --model resnet18|vit). Each part's output lands in $OUT (or
# build-vision/logs) as it finishes; summary.txt has one line per part.
# Needs third_party/ and .data/fashion-mnist carried to the GPU machine. Knobs: BUILD, JOBS (16),
# RESNET_EPOCHS (15), VIT_EPOCHS (40), SKIP_TRAIN=1, SKIP_BENCH=1, TORCH=1 (also the libtorch
# twin's rows, built against the PyTorch wheel's libtorch).
. "$(dirname "$0")/gpu-common.sh"
gpu_folders "$HOME/build-vision" build-vision/logs
DATA=${DATA:-.data/fashion-mnist}

torch_flags=(-DLOOM_LIBTORCH=OFF)
targets="train_cnn bench_train test_cuda"
if [ "${TORCH:-0}" = 1 ]; then
  prefix=$(python3 -c "import torch.utils; print(torch.utils.cmake_prefix_path)")
  torch_flags=(-DLOOM_LIBTORCH=ON -DCMAKE_PREFIX_PATH="$prefix")
  targets="$targets bench_train_torch"
fi
gpu_build build "$targets" "${torch_flags[@]}"
stamp "built $targets"

"$BUILD/tests/test_cuda" --gtest_brief=1 --gtest_filter='CudaVision*' > "$LOG/test_cuda.txt" 2>&1
stamp "test_cuda CudaVision*: $(grep -E 'PASSED|FAILED' "$LOG/test_cuda.txt" | tr '\n' ' ')"

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  steps=(--steps 20 --repeats 3 --warmup 5)
  for w in resnet50 vit-b16; do
    for mode in "" "--cuda-graph"; do
      "$BUILD/benchmarks/bench_train" --workload $w --amp bf16 $mode "${steps[@]}" \
        > "$LOG/bench_$w$mode.txt" 2>&1
      stamp "loom $w bf16 $mode: $(grep -E "^$w " "$LOG/bench_$w$mode.txt" | awk '{print $6 " ms/step, peak " $9 " MiB"}') $(grep -i error "$LOG/bench_$w$mode.txt" | head -2)"
      if [ "${TORCH:-0}" = 1 ] && [ -z "$mode" ]; then
        "$BUILD/benchmarks/libtorch/bench_train_torch" --workload $w --dtype bf16 "${steps[@]}" \
          > "$LOG/torch_$w.txt" 2>&1
        stamp "libtorch $w bf16: $(grep -E "^$w " "$LOG/torch_$w.txt" | awk '{print $6 " ms/step, peak " $9 " MiB"}') $(grep -i error "$LOG/torch_$w.txt" | head -2)"
      fi
    done
  done
fi

if [ "${SKIP_TRAIN:-0}" != 1 ]; then
  common=(--data-dir "$DATA" --workers 4 --batch-size 128 --augment true --amp bf16 --log-every 100)
  timeout -k 5 540 "$BUILD/examples/train_cnn" "${common[@]}" --model resnet18 \
    --epochs "${RESNET_EPOCHS:-15}" --optimizer sgd --lr 0.1 --weight-decay 5e-4 \
    --lr-schedule cosine --warmup 200 > "$LOG/train_resnet18.txt" 2>&1 &
  timeout -k 5 540 "$BUILD/examples/train_cnn" "${common[@]}" --model vit \
    --epochs "${VIT_EPOCHS:-40}" --optimizer adamw --lr 1e-3 --weight-decay 0.05 \
    --label-smoothing 0.1 --lr-schedule cosine --warmup 500 > "$LOG/train_vit.txt" 2>&1 &
  wait
  for m in resnet18 vit; do
    stamp "train_cnn --model $m: $(grep -E 'final|error' "$LOG/train_$m.txt" | tr '\n' ' ')"
  done
fi
cat "$LOG/summary.txt"
