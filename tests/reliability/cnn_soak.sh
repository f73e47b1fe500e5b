#!/usr/bin/env bash
# Long-run soak: train_cnn (the classifier with BatchNorm, dropout and --augment, so every RNG
# stream matters) on the CPU for EPOCHS epochs of the first TRAIN_LIMIT images (tested on 2000),
# with a checkpoint every 2 steps, while this script SIGKILLs it at random moments (0.5 to 8.5 s
# after each start, so kills land while it loads data, in a step, in the evaluation or in a save)
# and starts it again with --resume, until it completes. Then it compares with an uninterrupted
# run: the final accuracy and the final checkpoint, byte for byte. Not part of ctest (minutes);
# docs/reliability.md has figures.
#   tests/reliability/cnn_soak.sh <build folder> [EPOCHS] [TRAIN_LIMIT]
build=$1
epochs=${2:-6}
limit=${3:-256}
source "$(dirname "$0")/lib.sh"
need "$cnn" "$data/train-images-idx3-ubyte.gz"
small_data "$tmp/data" "$limit" 2000  # the first LIMIT training and 2000 test images
args=(--device cpu --epochs "$epochs" --batch-size 32 --seed 3 --augment true --workers 1
  --log-every 4 --checkpoint-every 2 --data-dir "$tmp/data")

t0=$(now_ms)
"$cnn" "${args[@]}" --checkpoint-dir "$tmp/straight" >"$tmp/straight.out" 2>&1 ||
  { bad "the uninterrupted run failed: $(tail -n 3 "$tmp/straight.out")"; finish; }
straight_ms=$(($(now_ms) - t0))
final=$(newest "$tmp/straight")
acc_straight=$(grep -o "final test accuracy [0-9.]*%" "$tmp/straight.out")

ck=$tmp/soak
mkdir -p "$ck"
kills=0 starts=0 t0=$(now_ms)
while :; do
  "$cnn" "${args[@]}" --checkpoint-dir "$ck" --resume >>"$tmp/soak.out" 2>>"$tmp/soak.err" &
  pid=$!
  starts=$((starts + 1))
  sleep "$((RANDOM % 8)).$(printf '%03d' $((RANDOM % 1000)))"
  sleep 0.5
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  rc=$?
  if [ $rc -eq 137 ]; then
    kills=$((kills + 1))
    echo "kill $kills: newest checkpoint $(basename "$(newest "$ck")")" >>"$tmp/soak.log"
  else  # it completed before the kill
    [ $rc -eq 0 ] || bad "start $starts exited $rc: $(tail -n 3 "$tmp/soak.err")"
    break
  fi
  [ $starts -lt 2000 ] || { bad "no end after $starts starts"; break; }
done
ms=$(($(now_ms) - t0))
acc_soak=$(grep -o "final test accuracy [0-9.]*%" "$tmp/soak.out" | tail -n 1)
grep -q "skipping checkpoint" "$tmp/soak.err" && bad "a broken checkpoint was skipped"
ok "$kills SIGKILLs over $starts starts; $(grep -c "resumed from" "$tmp/soak.out") resumes"
ok "uninterrupted: $acc_straight in $((straight_ms / 1000)) s; killed and resumed: $acc_soak in $((ms / 1000)) s"
[ "$acc_straight" = "$acc_soak" ] && ok "the final accuracy matches" || bad "the final accuracy differs"
same_file "$ck/$(basename "$final")" "$final" "soak vs uninterrupted"
finish
