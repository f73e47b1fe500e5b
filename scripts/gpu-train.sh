#!/usr/bin/env bash
# gpu-train.sh: on the GPU machine, builds the example programs and bench_train, trains the MLP
# and the CNN on Fashion-MNIST (10 epochs each), checks --cuda-graph against eager, and runs the
# training-step benchmarks (eager and CUDA graph). Prints a summary last; logs go to $OUT.
#   DATA=/path/to/fashion-mnist scripts/gpu-train.sh     # the idx .gz files (default .data/fashion-mnist)
#   EPOCHS=10 scripts/gpu-train.sh
. "$(dirname "$0")/gpu-common.sh"
gpu_folders build-gpu
DATA=${DATA:-.data/fashion-mnist}
EPOCHS=${EPOCHS:-10}
SUMMARY=$LOG/train_summary.txt

gpu_build train_build "train_mlp train_cnn bench_train test_train envinfo"
row build "ok ($(elapsed))"
"$BUILD/examples/envinfo" | head -20

acc() { grep -oE 'final test accuracy [0-9.]+%' "$1" | grep -oE '[0-9.]+%'; }
for model in mlp cnn; do
  s=$(date +%s)
  "$BUILD/examples/train_$model" --epochs "$EPOCHS" --data-dir "$DATA" --workers 4 \
    --log-dir "$LOG/tb_$model" --checkpoint-dir "$BUILD/ckpt_$model" > "$LOG/train_$model.log" 2>&1
  tail -n 3 "$LOG/train_$model.log"
  row "train_$model ($EPOCHS epochs)" "$(acc "$LOG/train_$model.log") test accuracy, $(( $(date +%s) - s ))s wall"
  grep -E "ms/step" "$LOG/train_$model.log" | tail -1
done

s=$(date +%s)
"$BUILD/examples/train_mlp" --epochs 1 --data-dir "$DATA" --workers 4 --cuda-graph > "$LOG/train_mlp_graph.log" 2>&1
tail -n 2 "$LOG/train_mlp_graph.log"
row "train_mlp --cuda-graph (1 epoch)" "$(acc "$LOG/train_mlp_graph.log"), $(( $(date +%s) - s ))s wall"

(cd "$BUILD" && ./tests/test_cuda --gtest_filter='CudaGraphStep.*') > "$LOG/graph_test.log" 2>&1
row "graph vs eager step test" "$(grep -E '\[  (PASSED|FAILED) ' "$LOG/graph_test.log" | tr '\n' ' ')"

"$BUILD/benchmarks/bench_train" > "$LOG/bench_eager.log" 2>&1; cat "$LOG/bench_eager.log"
"$BUILD/benchmarks/bench_train" --cuda-graph --workload mlp > "$LOG/bench_graph.log" 2>&1; cat "$LOG/bench_graph.log"
"$BUILD/benchmarks/bench_train" --cuda-graph --workload cnn >> "$LOG/bench_graph.log" 2>&1; tail -1 "$LOG/bench_graph.log"

printf '\n== summary (%s)\n' "$(elapsed)"
printf '%s\n' "${summary[@]}"
grep -hE "^(mlp|cnn|wide) " "$LOG/bench_eager.log" "$LOG/bench_graph.log"
