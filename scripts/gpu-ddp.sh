#!/usr/bin/env bash
# gpu-ddp.sh: DistributedDataParallel on a multi-GPU machine, in one call. Builds loom for Hopper,
# runs the NCCL DDP tests (2 processes), bench_ddp (loom) and benchmarks/pytorch/ddp_bench.py
# (PyTorch DDP) on 1 and NGPU GPUs, and train_cnn on 1 GPU and under loomrun on NGPU GPUs (same
# global batch), then prints one summary table last. NGPU defaults to every GPU nvidia-smi lists
# (2 on the two-GPU machine; NGPU=4 or 8 for the larger kinds). Everything it writes goes to $OUT (default
# build-gpu/ddp-logs). NCCL's NVLink multicast stays off (NCCL_NVLS_ENABLE=0). About 6 minutes.
#
#   OUT=/tmp/out scripts/gpu-ddp.sh
#   DATA=/path/to/fashion-mnist EPOCHS=2 scripts/gpu-ddp.sh     # the .gz files (default .data/fashion-mnist)
#   SKIP_TORCH=1 SKIP_TRAIN=1 scripts/gpu-ddp.sh                 # loom's benchmark only
#   NGPU=4 scripts/gpu-ddp.sh                                     # the k-GPU rows on 4 GPUs
. "$(dirname "$0")/gpu-common.sh"
ROOT=$(pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
gpu_folders "$BUILD" "$BUILD/ddp-logs"
DATA=${DATA:-$ROOT/.data/fashion-mnist}
EPOCHS=${EPOCHS:-3}
JOBS=${JOBS:-16}
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
[ "${NGPU:-0}" -ge 2 ] 2>/dev/null || NGPU=2
SUMMARY=$LOG/summary.txt
: > "$SUMMARY"
LOOMRUN="$BUILD/distributed/launcher/loomrun"

echo "== configure and build ($BUILD)"
gpu_build build "test_distributed ddp_tool bench_ddp train_cnn loomrun" -DLOOM_BUILD_BENCHMARKS=ON
row build "ok ($(elapsed))"

echo "== NCCL DDP tests"
timeout 240 "$BUILD/tests/test_distributed" --gtest_filter='DDPNccl.*:DDPBuckets.*' > "$LOG/ddp_tests.log" 2>&1
rc=$?
tail -n 15 "$LOG/ddp_tests.log"
row "DDP NCCL tests (2 GPUs)" "$(grep -oE '\[  PASSED  \] [0-9]+' "$LOG/ddp_tests.log" | grep -oE '[0-9]+$' || echo 0) passed, $(grep -oE '\[  SKIPPED \] [0-9]+' "$LOG/ddp_tests.log" | grep -oE '[0-9]+$' || echo 0) skipped, exit $rc"

echo "== bench_ddp (loom) on 1 and $NGPU GPUs"
: > "$LOG/bench.log"
timeout 150 "$BUILD/benchmarks/bench_ddp" 2>&1 | tee -a "$LOG/bench.log"
row "bench_ddp 1 GPU" "exit ${PIPESTATUS[0]}"
timeout 180 "$LOOMRUN" --nproc_per_node="$NGPU" "$BUILD/benchmarks/bench_ddp" 2>&1 | tee -a "$LOG/bench.log"
row "bench_ddp $NGPU GPUs (loomrun)" "exit ${PIPESTATUS[0]}"
if [ -z "${SKIP_BF16:-}" ]; then
  timeout 150 "$BUILD/benchmarks/bench_ddp" --amp bf16 2>&1 | tee -a "$LOG/bench.log"
  row "bench_ddp --amp bf16 1 GPU" "exit ${PIPESTATUS[0]}"
  timeout 180 "$LOOMRUN" --nproc_per_node="$NGPU" "$BUILD/benchmarks/bench_ddp" --amp bf16 2>&1 | tee -a "$LOG/bench.log"
  row "bench_ddp --amp bf16 $NGPU GPUs" "exit ${PIPESTATUS[0]}"
fi
if [ -z "${SKIP_TORCH:-}" ]; then
  echo "== ddp_bench.py (PyTorch) on 1 and $NGPU GPUs"
  timeout 150 python3 benchmarks/pytorch/ddp_bench.py 2>&1 | tee -a "$LOG/bench.log"
  row "ddp_bench.py 1 GPU" "exit ${PIPESTATUS[0]}"
  timeout 180 python3 -m torch.distributed.run --nproc_per_node="$NGPU" benchmarks/pytorch/ddp_bench.py 2>&1 | tee -a "$LOG/bench.log"
  row "ddp_bench.py $NGPU GPUs (torchrun)" "exit ${PIPESTATUS[0]}"
  if [ -z "${SKIP_BF16:-}" ]; then
    timeout 150 python3 benchmarks/pytorch/ddp_bench.py --amp bf16 2>&1 | tee -a "$LOG/bench.log"
    row "ddp_bench.py --amp bf16 1 GPU" "exit ${PIPESTATUS[0]}"
    timeout 180 python3 -m torch.distributed.run --nproc_per_node="$NGPU" benchmarks/pytorch/ddp_bench.py --amp bf16 2>&1 | tee -a "$LOG/bench.log"
    row "ddp_bench.py --amp bf16 $NGPU GPUs" "exit ${PIPESTATUS[0]}"
  fi
fi

if [ -z "${SKIP_TRAIN:-}" ]; then
  echo "== train_cnn: 1 GPU, then loomrun on $NGPU GPUs (global batch 128, $EPOCHS epochs, data $DATA)"
  timeout 150 "$BUILD/examples/train_cnn" --data-dir "$DATA" --epochs "$EPOCHS" --batch-size 128 \
    > "$LOG/train_cnn_1gpu.log" 2>&1
  row "train_cnn 1 GPU" "exit $?, $(grep -oE 'final test accuracy [0-9.]+%.*' "$LOG/train_cnn_1gpu.log" | tail -1)"
  timeout 150 "$LOOMRUN" --nproc_per_node="$NGPU" "$BUILD/examples/train_cnn" --data-dir "$DATA" --epochs "$EPOCHS" \
    --batch-size 128 --profile > "$LOG/train_cnn_${NGPU}gpu.log" 2>&1
  row "train_cnn $NGPU GPUs (loomrun)" "exit $?, $(grep -oE 'final test accuracy [0-9.]+%.*' "$LOG/train_cnn_${NGPU}gpu.log" | tail -1)"
  grep -E 'profile rank' "$LOG/train_cnn_${NGPU}gpu.log" | sed 's/^/  /' | cut -c1-200 >> "$LOG/summary.txt"
  grep -E 'profile rank' "$LOG/train_cnn_${NGPU}gpu.log" | cut -c1-200
fi

# ---- the table: scaling efficiency t1 / tk and the share of all-reduce hidden behind backward.
# loom: hidden = 1 - exposed / alone, exposed from CUDA events (BackwardEnd - BackwardComputed).
# Both: hidden_est = 1 - max(0, t2 - t1) / alone (the step-time growth charged to communication).
python3 - "$LOG/bench.log" "$NGPU" > "$LOG/table.txt" <<'PY'
import sys
k = int(sys.argv[2])
res = {}
for line in open(sys.argv[1]):
    if line.startswith("RESULT") or "RESULT" in line:
        p = line[line.index("RESULT"):].split()
        if len(p) < 7: continue
        res[(p[1], p[2], int(p[3]))] = (float(p[4]), float(p[5]), float(p[6]))
print(f"{'workload':9s} {'fw':6s} {'1 GPU ms':>9s} {f'{k} GPU ms':>9s} {'efficiency':>10s} {'AR alone ms':>11s} {'hidden (events)':>15s} {'hidden (t2-t1)':>14s}")
for w in ("mlp", "cnn", "wide", "mlp_bf16", "cnn_bf16", "wide_bf16"):
    for fw in ("loom", "torch"):
        a, b = res.get((fw, w, 1)), res.get((fw, w, k))
        if not a or not b:
            if not w.endswith("_bf16"): print(f"{w:9s} {fw:6s} missing")
            continue
        t1, t2, alone, exposed = a[0], b[0], b[1], b[2]
        eff = t1 / t2
        ev = f"{100*max(0.0, 1-exposed/alone):.0f}%" if exposed >= 0 and alone > 0 else "-"
        est = f"{100*max(0.0, 1-max(0.0, t2-t1)/alone):.0f}%" if alone > 0 else "-"
        print(f"{w:9s} {fw:6s} {t1:9.3f} {t2:9.3f} {eff:10.3f} {alone:11.3f} {ev:>15s} {est:>14s}")
PY
cat "$LOG/table.txt" >> "$LOG/summary.txt"

echo
echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), total $(elapsed))"
printf '%s\n' "${summary[@]}"
cat "$LOG/table.txt"
