#!/usr/bin/env bash
# fuzz.sh: long libFuzzer runs of the harnesses in tests/fuzz (built by scripts/sanitize.sh asan,
# or any build configured with LOOM_FUZZ=ON), one after another or two at a time.
#   scripts/fuzz.sh 600                       # every harness for 600 s each
#   scripts/fuzz.sh 600 idx flags             # these harnesses only
#   PARALLEL=2 scripts/fuzz.sh 600            # two at a time (one core each)
# The corpus grows in build-asan/fuzz/<harness>/corpus (seeded from tests/fuzz/corpus/<harness>);
# findings (crash-*, leak-*, timeout-*, oom-*) land in build-asan/fuzz/<harness>/; each harness's
# log ends with libFuzzer's final statistics (stat::number_of_executed_units is the count of
# inputs run). Runs at the lowest CPU priority (nice 19).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${BUILD:-build-asan}
seconds=${1:-600}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -eq 0 ] && harnesses=(safetensors checkpoint idx store_protocol flags)
parallel=${PARALLEL:-1}

one() {
  local h=$1 dir=$build/fuzz/$1
  mkdir -p "$dir/corpus"
  local seeds=("$root/tests/fuzz/corpus/$h")
  [ -d "$root/tests/fuzz/regressions/$h" ] && seeds+=("$root/tests/fuzz/regressions/$h")
  local t0
  t0=$(date +%s)
  ASAN_OPTIONS=detect_leaks=1 nice -n 19 "$build/tests/fuzz/${h}_fuzz" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/" \
    "$dir/corpus" "${seeds[@]}" > "$dir/log.txt" 2>&1
  local rc=$?
  local execs
  execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$dir/log.txt" | grep -oE '[0-9]+$')
  printf '%-16s exit %d, %s s, %s executions, corpus %s files\n' "$h" "$rc" \
    "$(( $(date +%s) - t0 ))" "${execs:-?}" "$(find "$dir/corpus" -type f | wc -l)" | tee "$dir/summary.txt"
  return $rc
}

rc=0
pids=()
for h in "${harnesses[@]}"; do
  one "$h" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$parallel" ]; then
    wait "${pids[0]}" || rc=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
