# Shared by the fault-injection scripts in tests/reliability: program paths, the tiny CPU run they
# train, and small helpers. Source it after setting build=<build folder>.
# shellcheck shell=bash
set -u
mlp=$build/examples/train_mlp
cnn=$build/examples/train_cnn
loomrun=$build/distributed/launcher/loomrun
data=${LOOM_DATA_DIR:-/usr/share/datasets/fashion-mnist}
fails=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loom-reliability.XXXXXX")
trap 'for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done; [ -n "${LOOM_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1

need() {  # need <file>...: exit 77 (skipped) when a program is not built or the data is missing
  for f in "$@"; do
    [ -e "$f" ] || { echo "skipped: $f is missing"; exit 77; }
  done
}

# be32 <n>: n as 4 big-endian bytes, for printf.
be32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }

# small_data <dir> <train images> <test images>: the first images of Fashion-MNIST as plain idx
# files (the reader takes them as well as .gz), so that each start of a program loads in
# milliseconds and the evaluation is short.
small_data() {
  local out=$1 split n
  mkdir -p "$out"
  for split in train:$2 t10k:$3; do
    n=${split#*:} split=${split%:*}
    { printf '\x00\x00\x08\x03'; printf "$(be32 "$n")"; printf '\x00\x00\x00\x1c\x00\x00\x00\x1c'
      gzip -dc "$data/$split-images-idx3-ubyte.gz" | tail -c +17 | head -c $((n * 784)); } >"$out/$split-images-idx3-ubyte"
    { printf '\x00\x00\x08\x01'; printf "$(be32 "$n")"
      gzip -dc "$data/$split-labels-idx1-ubyte.gz" | tail -c +9 | head -c "$n"; } >"$out/$split-labels-idx1-ubyte"
  done
}

# The tiny run: a 784-32-32-10 MLP, 1024 training images, batch 32 (32 steps per epoch), 2 epochs,
# evaluated on 1000 test images (crash_checkpoints.sh: 10 epochs). Call small_data "$tmp/data" 1024 1000 first.
mlp_args() {  # [epochs]
  echo --device cpu --hidden 32 --batch-size 32 --epochs "${1:-2}" --seed 7 \
    --workers 0 --log-every 4 --data-dir "$tmp/data"
}

ok() { echo "ok    $*"; }
bad() {
  echo "FAIL  $*"
  fails=$((fails + 1))
}

# newest <dir>: the highest-numbered checkpoint file in dir ("" when none).
newest() { ls "$1"/ckpt-*.safetensors 2>/dev/null | sort | tail -n 1; }

# same_file <a> <b> <what>: byte-for-byte equal.
same_file() {
  if [ -f "$1" ] && [ -f "$2" ] && cmp -s "$1" "$2"; then
    ok "$3: $(basename "$1") is byte-identical ($(stat -c %s "$1") bytes)"
  else
    bad "$3: $1 and $2 differ (or one is missing)"
  fi
}

# wait_for_newer <dir> <than> <pid> <seconds>: until a checkpoint newer than <than> appears;
# returns 1 when pid exited first or the time ran out.
wait_for_newer() {
  local end=$((SECONDS + $4)) n
  while [ $SECONDS -lt $end ]; do
    n=$(newest "$1")
    [ -n "$n" ] && [ "$n" != "$2" ] && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}

# rand_sleep <max milliseconds>
rand_sleep() { sleep "$(printf '0.%03d' $((RANDOM % $1)))"; }

# now_ms: a monotonic-enough wall clock in milliseconds.
now_ms() { date +%s%3N; }

finish() {
  if [ "$fails" -gt 0 ]; then
    echo "$fails check(s) failed"
    exit 1
  fi
  echo "all checks passed"
  exit 0
}
