#!/usr/bin/env bash
# Runs one libFuzzer harness on copies of the seed folders, so that the inputs libFuzzer adds
# never land in the repository: run.sh <harness> [-flag=value ...] <seed folder>...
# A crash, a leak, an input slower than 10 s or over 2 GiB fails it (libFuzzer's exit status);
# the offending input is saved as crash-*/leak-*/timeout-* in the current folder.
set -euo pipefail
bin=$1
shift
flags=()
seeds=()
for a in "$@"; do
  if [[ $a == -* ]]; then flags+=("$a"); else seeds+=("$a"); fi
done
work=$(mktemp -d /tmp/loom-fuzz-XXXXXX)
trap 'rm -rf "$work"' EXIT
exec_dir=${LOOM_FUZZ_ARTIFACTS:-$PWD}
"$bin" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$exec_dir/" \
  "${flags[@]}" "$work" "${seeds[@]}"
