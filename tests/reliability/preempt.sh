#!/usr/bin/env bash
# Preemption: a SIGTERM (or SIGINT) to train_mlp, or a SIGTERM to loomrun running it on 2 Gloo
# processes, at a random moment of training: the step in flight finishes, a checkpoint of that
# step is written, the program exits 143 (130 for SIGINT) within a bound, and a run started again
# with --resume ends with a final checkpoint byte-identical to an uninterrupted run's.
#   tests/reliability/preempt.sh <build folder> [ROUNDS]
build=$1
rounds=${2:-3}
source "$(dirname "$0")/lib.sh"
need "$mlp" "$loomrun" "$data/train-images-idx3-ubyte.gz"
small_data "$tmp/data" 1024 1000
# 1280 steps: a run must outlast its first checkpoint plus the random delay (at most 200 ms) on
# a fast machine too (the CPU step of this small MLP takes 0.3-0.5 ms: 6 epochs were too short).
read -r -a args <<<"$(mlp_args 40)"
args+=(--checkpoint-every 8)  # to see that training runs; the weights do not depend on it
bound_ms=5000

# stop_and_resume <label> <signal> <want exit> <straight final> <launcher argv...> --
stop_and_resume() {
  local label=$1 sig=$2 want=$3 final=$4
  shift 4
  local launcher=()
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  local dir=$tmp/$label
  "${launcher[@]}" "$mlp" "${args[@]}" --checkpoint-dir "$dir" >"$tmp/$label.out" 2>&1 &
  local pid=$!
  wait_for_newer "$dir" "" $pid 120 || { bad "$label: no checkpoint appeared"; return; }
  rand_sleep 200
  local t=$(now_ms)
  kill -"$sig" $pid
  wait $pid
  local rc=$? ms=$(($(now_ms) - t))
  local line saved
  line=$(grep -E "got SIG(TERM|INT): stopped after .* and saved " "$tmp/$label.out" | head -n 1)
  saved=$(sed -E 's/.* and saved ([^;]*);.*/\1/' <<<"$line")
  if [ "$rc" -eq "$want" ] && [ -n "$line" ] && [ "$ms" -lt $bound_ms ]; then
    ok "$label: SIG$sig -> exit $rc in ${ms} ms: ${line#*] }"
  else
    bad "$label: SIG$sig -> exit $rc (want $want) in ${ms} ms; output: $(tail -n 4 "$tmp/$label.out")"
    return
  fi
  [ "$saved" = "$(newest "$dir")" ] || bad "$label: the newest checkpoint is $(newest "$dir"), not $saved"
  "${launcher[@]}" "$mlp" "${args[@]}" --checkpoint-dir "$dir" --resume >"$tmp/$label.resume" 2>&1 ||
    { bad "$label: the resumed run failed: $(tail -n 3 "$tmp/$label.resume")"; return; }
  grep -qF "resumed from $saved " "$tmp/$label.resume" || bad "$label: did not resume from $saved"
  same_file "$dir/$(basename "$final")" "$final" "$label: stopped at $(basename "$saved"), resumed"
}

# One process.
"$mlp" "${args[@]}" --checkpoint-dir "$tmp/straight" >"$tmp/straight.out" 2>&1 ||
  { bad "the uninterrupted run failed"; finish; }
final=$(newest "$tmp/straight")
for r in $(seq 1 "$rounds"); do
  stop_and_resume "one-process-term-$r" TERM 143 "$final" --
done
stop_and_resume one-process-int INT 130 "$final" --

# Two Gloo processes under loomrun: SIGTERM to loomrun, which forwards it to both ranks.
lr=("$loomrun" --standalone --nproc_per_node 2 --grace 30 --quiet)
"${lr[@]}" "$mlp" "${args[@]}" --checkpoint-dir "$tmp/straight2" >"$tmp/straight2.out" 2>&1 ||
  { bad "the uninterrupted 2-process run failed: $(tail -n 5 "$tmp/straight2.out")"; finish; }
final2=$(newest "$tmp/straight2")
for r in $(seq 1 "$rounds"); do
  stop_and_resume "loomrun-2-gloo-term-$r" TERM 143 "$final2" "${lr[@]}" --
done
finish
