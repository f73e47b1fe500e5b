#!/usr/bin/env bash
# bench-compare.sh: loom's training-step benchmark (benchmarks/bench_train) and its libtorch twin
# (benchmarks/libtorch/bench_train_torch) side by side, in one run on one machine, then one table:
# ms/step of each (median; min and max shown), the ratio loom/libtorch, peak device memory of each
# and its ratio, and the time from process start to the first finished step. Each (workload,
# framework) runs in a fresh process, the two frameworks alternating, so both see the same machine
# state. The machine, GPU clocks and versions are printed above the table.
#
#   scripts/bench-compare.sh                        # every workload on the GPU if there is one
#   DEVICE=cpu WORKLOADS="mlp cnn" STEPS=10 REPEATS=3 scripts/bench-compare.sh
#   DDP=4 scripts/bench-compare.sh                  # DDP rows on 1 and 4 GPUs as well
#   WORKLOADS=gpt DDP=1 scripts/bench-compare.sh    # GPT-2 124M: bf16 rows only (GPT_STEPS, GPT_REPEATS)
#   WORKLOADS="resnet50 vit-b16" scripts/bench-compare.sh  # ResNet-50, ViT-B/16 (B 64): the same
#
# DDP rows (GPU only): loom's bench_ddp under loomrun against PyTorch DDP (benchmarks/pytorch/
# ddp_bench.py) under torchrun, fp32 and bf16 autocast, on 1 and k GPUs, in a second table: ms/step
# of each on each count, the scaling efficiency (1-GPU step / k-GPU step) and the ratio of the
# k-GPU steps. DDP=k picks k; by default every GPU when there are two or more, none with one
# (DDP=1 runs the 1-GPU rows alone, DDP=0 skips them).
#
# Torch: Debian's libtorch-dev (CPU) is found without hints; on a machine with PyTorch installed
# the wheel's CMake package is used (TORCH_PREFIX overrides). Knobs: BUILD (build folder, default
# build-bench), JOBS, DEVICE (cpu, cuda), WORKLOADS, STEPS, REPEATS, WARMUP. Output also goes to
# $OUT/bench-compare.txt when OUT is set.
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=${BUILD:-build-bench}
JOBS=${JOBS:-$(nproc)}
WORKLOADS=${WORKLOADS:-"mlp cnn wide"}
STEPS=${STEPS:-50}
REPEATS=${REPEATS:-5}
WARMUP=${WARMUP:-10}
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
if [ -z "${DEVICE:-}" ]; then
  DEVICE=cpu
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU && DEVICE=cuda
fi
if [ -z "${TORCH_PREFIX:-}" ]; then
  TORCH_PREFIX=$(python3 -c "import torch.utils; print(torch.utils.cmake_prefix_path)" 2>/dev/null || true)
fi
out=${OUT:+$OUT/bench-compare.txt}
log() { echo "$@"; [ -n "$out" ] && echo "$@" >> "$out"; return 0; }
[ -n "$out" ] && : > "$out"

# ---- build both programs
cuda_flag=OFF
[ "$DEVICE" != cpu ] && cuda_flag=ON
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA="$cuda_flag" \
  -DCMAKE_CUDA_ARCHITECTURES="${LOOM_CUDA_ARCHITECTURES:-90}" -DLOOM_BUILD_TESTS=OFF \
  -DLOOM_LIBTORCH=ON ${TORCH_PREFIX:+-DCMAKE_PREFIX_PATH="$TORCH_PREFIX"} > "$BUILD.configure.log" 2>&1 \
  || { tail -20 "$BUILD.configure.log"; echo "bench-compare: configure failed (is Torch installed? see above)"; exit 1; }
cmake --build "$BUILD" -j "$JOBS" --target bench_train bench_train_torch > "$BUILD.build.log" 2>&1 \
  || { grep -E "error" "$BUILD.build.log" | head -20; echo "bench-compare: build failed"; exit 1; }

# ---- the machine
log "== bench-compare $(date -u +%Y-%m-%dT%H:%MZ), device $DEVICE, $STEPS steps x $REPEATS repeats after $WARMUP warm-up"
log "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') ($(nproc) threads)"
if [ "$DEVICE" != cpu ]; then
  log "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv,noheader | head -1)"
fi
log "loom: $(git describe --always --dirty 2>/dev/null || echo unknown); torch: $(grep -m1 'libtorch twin' "$BUILD.configure.log" | sed 's/.*Torch //')"
if [ "$DEVICE" = cpu ]; then export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}; log "OMP_NUM_THREADS=$OMP_NUM_THREADS"; fi

# ---- run: one process per (workload, framework, mode); the columns of both programs are
# model device dtype mode batch ms/step min max peak first-step
common=(--device "$DEVICE" --steps "$STEPS" --repeats "$REPEATS" --warmup "$WARMUP")
rows=$(mktemp)
gpt_lines=$(mktemp)
# loom's rows; a GPT row's tokens/s and MFU line (indented) goes to gpt_lines.
loom_rows() {
  "$BUILD/benchmarks/bench_train" "$@" | tee -a "$gpt_lines" | awk -v f=loom 'NR>1 && /^[^ ]/ {print f, $0}' >> "$rows"
}
for w in $WORKLOADS; do
  # The GPTs, ResNet-50 and ViT-B/16: bf16 autocast only on a GPU (docs/workloads.md), GPT_STEPS
  # x GPT_REPEATS; the twin runs ResNet-50 channels-last under bf16, as bench_train does.
  if [[ "$w" == gpt* || "$w" == resnet50 || "$w" == vit-b16 ]]; then
    g=(--workload "$w" --device "$DEVICE" --steps "${GPT_STEPS:-20}" --repeats "${GPT_REPEATS:-3}" --warmup "$WARMUP")
    amp=(); tamp=()
    [ "$DEVICE" != cpu ] && amp=(--amp bf16) && tamp=(--dtype bf16)
    loom_rows "${g[@]}" "${amp[@]}"
    [ "$DEVICE" != cpu ] && loom_rows "${g[@]}" "${amp[@]}" --cuda-graph
    "$BUILD/benchmarks/libtorch/bench_train_torch" "${g[@]}" "${tamp[@]}" | awk -v f=torch 'NR>1 {print f, $0}' >> "$rows"
    continue
  fi
  loom_rows --workload "$w" "${common[@]}"
  "$BUILD/benchmarks/libtorch/bench_train_torch" --workload "$w" "${common[@]}" | awk -v f=torch 'NR>1 {print f, $0}' >> "$rows"
  if [ "$DEVICE" != cpu ]; then
    loom_rows --workload "$w" "${common[@]}" --cuda-graph
    loom_rows --workload "$w" "${common[@]}" --optimizer-in-backward
    loom_rows --workload "$w" --amp bf16 "${common[@]}"
    "$BUILD/benchmarks/libtorch/bench_train_torch" --workload "$w" --dtype bf16 "${common[@]}" | awk -v f=torch 'NR>1 {print f, $0}' >> "$rows"
  fi
done

# ---- one table: rows keyed by (model, dtype, mode); a missing side prints "-"
table=$(awk '
  { key = $2 " " $4 " " $5; if (!(key in seen)) { seen[key] = 1; keys[++n] = key }
    ms[$1, key] = $7; mn[$1, key] = $8; mx[$1, key] = $9; pk[$1, key] = $10; fs[$1, key] = $11 }
  function v(f, k, a) { return ((f, k) in a) ? a[f, k] : "-" }
  function ratio(a, b) { return (a == "-" || b == "-" || b + 0 == 0) ? "-" : sprintf("%.2f", a / b) }
  END {
    printf "%-6s %-5s %-6s %10s %10s %6s %19s %19s %9s %9s %5s %8s %8s %5s\n", "model", "dtype", "mode",
      "loom ms", "torch ms", "ratio", "loom min-max", "torch min-max", "loom MiB", "torch MiB", "ratio",
      "loom 1st", "torch 1st", "ratio"
    for (i = 1; i <= n; ++i) { k = keys[i]; split(k, p, " ")
      # an in-bwd row (loom only) compares with the libtorch eager step
      t = (p[3] == "in-bwd") ? p[1] " " p[2] " eager" : k
      lr = (("loom", k) in ms) ? sprintf("%s-%s", mn["loom", k], mx["loom", k]) : "-"
      tr = (("torch", t) in ms) ? sprintf("%s-%s", mn["torch", t], mx["torch", t]) : "-"
      printf "%-6s %-5s %-6s %10s %10s %6s %19s %19s %9s %9s %5s %8s %8s %5s\n", p[1], p[2], p[3],
        v("loom", k, ms), v("torch", t, ms), ratio(v("loom", k, ms), v("torch", t, ms)), lr, tr,
        v("loom", k, pk), v("torch", t, pk), ratio(v("loom", k, pk), v("torch", t, pk)),
        v("loom", k, fs), v("torch", t, fs), ratio(v("loom", k, fs), v("torch", t, fs)) } }' "$rows")
rm -f "$rows"
log ""
log "$table"
grep -E '^  gpt' "$gpt_lines" | while read -r line; do log "loom $line"; done
rm -f "$gpt_lines"
log "(ratio = loom / libtorch: below 1 is loom faster or smaller; MiB = peak device memory, 0 on the CPU;"
log " 1st = seconds from process start to the end of the first step; graph rows replay a CUDA graph and"
log " in-bwd rows run the optimizer inside backward (loom only; compared with libtorch's eager step))"

# ---- DDP rows: one process tree per (framework, GPU count, dtype); rank 0 prints
# "RESULT <framework> <workload>[_bf16] <gpus> <ms/step> <all-reduce alone ms> <exposed ms>".
ngpu=0
[ "$DEVICE" != cpu ] && ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
k=${DDP:-auto}
if [ "$k" = auto ]; then k=0; [ "$ngpu" -ge 2 ] && k=$ngpu; fi
if [ "$DEVICE" = cpu ] || [ "$k" -lt 1 ]; then
  log ""
  log "(no DDP rows: ${ngpu} GPU(s) here; DDP=k runs them on k GPUs)"
  exit 0
fi
[ "$k" -le "$ngpu" ] || { echo "bench-compare: DDP=$k but this machine has $ngpu GPU(s)"; exit 1; }
cmake --build "$BUILD" -j "$JOBS" --target bench_ddp loomrun >> "$BUILD.build.log" 2>&1 \
  || { grep -E "error" "$BUILD.build.log" | head -20; echo "bench-compare: building bench_ddp failed"; exit 1; }
ddp=$(mktemp)
counts=1
[ "$k" -ge 2 ] && counts="1 $k"
for w in $WORKLOADS; do
  for amp in off bf16; do
    for g in $counts; do
      args=(--workload "$w" --amp "$amp" --steps "$STEPS" --repeats "$REPEATS" --warmup "$WARMUP")
      if [ "$g" -eq 1 ]; then
        "$BUILD/benchmarks/bench_ddp" "${args[@]}" 2>&1 | grep -o 'RESULT.*' >> "$ddp" || true
        python3 benchmarks/pytorch/ddp_bench.py "${args[@]}" 2>&1 | grep -o 'RESULT.*' >> "$ddp" || true
      else
        "$BUILD/distributed/launcher/loomrun" --nproc_per_node="$g" "$BUILD/benchmarks/bench_ddp" \
          "${args[@]}" 2>&1 | grep -o 'RESULT.*' >> "$ddp" || true
        python3 -m torch.distributed.run --nproc_per_node="$g" benchmarks/pytorch/ddp_bench.py \
          "${args[@]}" 2>&1 | grep -o 'RESULT.*' >> "$ddp" || true
      fi
    done
  done
done
dtable=$(awk -v k="$k" '
  { key = $3; if (!(key in seen)) { seen[key] = 1; keys[++n] = key }; ms[$2, key, $4] = $5 }
  function v(f, w, g) { return ((f, w, g) in ms) ? ms[f, w, g] : "-" }
  function ratio(a, b) { return (a == "-" || b == "-" || b + 0 == 0) ? "-" : sprintf("%.2f", a / b) }
  END {
    printf "%-10s %10s %10s %6s %10s %10s %6s %10s\n", "workload", "loom 1", "loom " k, "eff",
      "torch 1", "torch " k, "eff", "ratio " k
    for (i = 1; i <= n; ++i) { w = keys[i]
      l1 = v("loom", w, 1); lk = v("loom", w, k); t1 = v("torch", w, 1); tk = v("torch", w, k)
      printf "%-10s %10s %10s %6s %10s %10s %6s %10s\n", w, l1, lk, ratio(l1, lk), t1, tk,
        ratio(t1, tk), ratio(lk, tk) } }' "$ddp")
rm -f "$ddp"
log ""
log "== DDP: ms/step on 1 and $k GPU(s), the same batch per GPU (loom under loomrun, PyTorch DDP under torchrun)"
log "$dtable"
log "(eff = 1-GPU step / $k-GPU step; ratio = loom / PyTorch at $k GPU(s); _bf16 rows: autocast to bfloat16)"
