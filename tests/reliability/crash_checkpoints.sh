#!/usr/bin/env bash
# Crash-safe checkpoints: train_mlp saves a checkpoint after every step while this script SIGKILLs
# it at random moments (most of a step's time is the save: encode, write, two fsyncs) and starts
# it again with --resume, KILLS times (default 24). Every restart must load the newest checkpoint
# on disk (no "skipping checkpoint" warning: no partial file ever took a checkpoint's name), and
# the run that finishes must end with a final checkpoint byte-identical to an uninterrupted run's.
#   tests/reliability/crash_checkpoints.sh <build folder> [KILLS]
build=$1
kills_wanted=${2:-24}
source "$(dirname "$0")/lib.sh"
need "$mlp" "$data/train-images-idx3-ubyte.gz"
small_data "$tmp/data" 1024 1000
read -r -a args <<<"$(mlp_args 48)"  # 1536 steps: room for the kills on a fast machine too

"$mlp" "${args[@]}" --checkpoint-dir "$tmp/straight" >"$tmp/straight.out" 2>&1 ||
  { bad "the uninterrupted run failed"; cat "$tmp/straight.out"; finish; }
final=$(newest "$tmp/straight")

ck=$tmp/killed
mkdir -p "$ck"
kills=0 in_save=0 attempts=0 t0=$(now_ms)
while :; do
  before=$(newest "$ck")
  "$mlp" "${args[@]}" --checkpoint-dir "$ck" --checkpoint-every 1 --keep-last 2 --resume \
    >"$tmp/run.out" 2>"$tmp/run.err" &
  pid=$!
  attempts=$((attempts + 1))
  done_now=0
  if [ $kills -lt "$kills_wanted" ] && wait_for_newer "$ck" "$before" $pid 120 &&
    [ "$(basename "$(newest "$ck")")" != "$(basename "$final")" ]; then
    rand_sleep 40
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    rc=$?
    if [ $rc -eq 137 ]; then
      kills=$((kills + 1))
      ls "$ck"/*.tmp.* >/dev/null 2>&1 && in_save=$((in_save + 1))
      # Killed after its final save: the run is complete (a --resume would say so and refuse).
      [ "$(basename "$(newest "$ck")")" = "$(basename "$final")" ] && done_now=1
    else  # it completed between the checkpoint and the kill
      [ $rc -eq 0 ] || bad "attempt $attempts exited $rc: $(tail -n 3 "$tmp/run.err")"
      done_now=1
    fi
  else
    wait $pid
    rc=$?
    [ $rc -eq 0 ] || bad "the last attempt exited $rc: $(tail -n 3 "$tmp/run.err")"
    done_now=1
  fi
  # This attempt must have resumed from the newest checkpoint that was on disk when it started.
  if [ -n "$before" ] && ! grep -qF "resumed from $before " "$tmp/run.out"; then
    bad "attempt $attempts did not resume from $before: $(grep -F resumed "$tmp/run.out")"
  fi
  if grep -q "skipping checkpoint" "$tmp/run.err"; then
    bad "attempt $attempts found a broken checkpoint: $(grep "skipping" "$tmp/run.err")"
  fi
  [ $done_now -eq 1 ] && break
done
secs=$(((($(now_ms) - t0) + 500) / 1000))
[ $kills -ge "$kills_wanted" ] || bad "only $kills kills (wanted $kills_wanted)"
[ "$fails" -eq 0 ] && ok "$kills SIGKILLs ($in_save of them while a checkpoint's temporary file was open), $attempts starts, every restart resumed from the newest checkpoint, ${secs}s"
same_file "$ck/$(basename "$final")" "$final" "killed $kills times vs uninterrupted"
left=$(ls "$ck" | grep -c '\.tmp\.')
[ "$left" -eq 0 ] && ok "no temporary file left behind" || bad "$left temporary files left in $ck"
finish
