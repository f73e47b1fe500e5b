#!/usr/bin/env bash
# Runs the example and benchmark programs with inputs a new user might type and checks that each
# ends with a clear message and exit code 1 (a run-time error) or 2 (a bad flag), never a crash
# (terminate, a signal: exit code >= 128) and never exit code 0.
#   tests/examples/bad_inputs.sh <build folder>   (programs in examples/ and benchmarks/ under it)
set -u
build=$1
find_prog() { for d in examples benchmarks; do [ -x "$build/$d/$1" ] && { echo "$build/$d/$1"; return; }; done; }
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
touch "$tmp/a-file"

# expect <code> <text the output must contain> <program> <args...>
expect() {
  local want=$1 text=$2 prog=$3
  shift 3
  local path
  path=$(find_prog "$prog")
  [ -n "$path" ] || { echo "skip  $prog (not built)"; return; }
  out=$("$path" "$@" 2>&1 </dev/null)
  rc=$?
  if [ "$rc" != "$want" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL  $prog $* -> exit $rc (want $want, output containing '$text'):"
    tail -n 5 <<<"$out" | sed 's/^/      /'
    fails=$((fails + 1))
  else
    echo "ok    $prog $* -> exit $rc: $(grep -F -- "$text" <<<"$out" | head -n 1)"
  fi
}

for p in train_mlp train_cnn; do
  expect 1 "cuda:99999999999" $p --device cuda:99999999999
  expect 1 "cuda:-1" $p --device cuda:-1
  expect 1 "cuda:x" $p --device cuda:x
  expect 1 "--device cuda:63" $p --device cuda:63
  expect 2 "--workers" $p --workers 99999999
  expect 2 "--epochs" $p --epochs 0
  expect 2 "--epochs" $p --epochs 99999999999999999999999
  expect 2 "--lr" $p --lr nan
  expect 2 "--lr" $p --lr inf
  expect 2 "Usage:" $p --no-such-flag
  expect 1 "does not exist" $p --device cpu --checkpoint-dir "$tmp/typo" --resume
  expect 1 "--checkpoint-dir" $p --device cpu --checkpoint-dir "$tmp/a-file/ckpt"
  expect 1 "--log-dir" $p --device cpu --log-dir "$tmp/a-file/runs"
  expect 1 "error:" $p --device cpu --data-dir "$tmp/no-data"
  expect 2 "--grad-accum" $p --grad-accum 0
  expect 1 "--grad-accum 3 must divide each process's batch of 128" $p --device cpu --grad-accum 3
done
expect 2 "--hidden" train_mlp --hidden 99999999999
expect 0 "--batch-size" train_mlp --help
expect 1 "cuda:x" bench_train --device cuda:x
expect 2 "--steps" bench_train --steps 0

# Runs that need the data (skipped without it).
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  small=(--device cpu --data-dir "$data" --hidden 16 --workers 0)
  expect 1 "no training step" train_mlp "${small[@]}" --train-limit 100 --batch-size 128
  expect 1 "training diverged: the loss at step" train_mlp "${small[@]}" --train-limit 2048 --optimizer sgd --lr 1000
  # A log write that fails later (here: a file size limit, as a full disk would) warns once and
  # the run goes on to its end.
  out=$( (ulimit -f 1; trap '' XFSZ; "$(find_prog train_mlp)" "${small[@]}" --train-limit 4096 --epochs 1 \
          --log-every 1 --log-dir "$tmp/runs") 2>&1)
  rc=$?
  warnings=$(grep -c "warning: TensorBoard logging stops" <<<"$out")
  if [ "$rc" = 0 ] && [ "$warnings" = 1 ] && grep -q "final test accuracy" <<<"$out"; then
    echo "ok    train_mlp with a failing log write -> exit 0, one warning"
  else
    echo "FAIL  train_mlp with a failing log write -> exit $rc, $warnings warnings:"
    tail -n 5 <<<"$out" | sed 's/^/      /'
    fails=$((fails + 1))
  fi
else
  echo "skip  the runs that need Fashion-MNIST (set FASHION_MNIST_DIR)"
fi

echo "$fails failed"
[ "$fails" = 0 ]
