# gpu-common.sh: what the scripts/gpu-*.sh share, sourced first (`. "$(dirname "$0")/gpu-common.sh"`):
# the repository root as the working folder, nvcc on the PATH, NCCL's NVLink multicast off
# (NCCL_NVLS_ENABLE=0), the start time t0, and the helpers below. Leaves out: what each script
# builds, runs and reports.
# shellcheck shell=bash
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export NCCL_NVLS_ENABLE=0
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
t0=$(date +%s)

# gpu_folders BUILD [LOG]: the build folder ($BUILD, else BUILD) and the log folder ($OUT, else
# LOG, else $BUILD/logs), which it makes.
gpu_folders() {
  BUILD=${BUILD:-$1}
  LOG=${OUT:-${2:-$BUILD/logs}}
  mkdir -p "$LOG"
}

# row NAME TEXT: a row of the summary table, NAME padded to $ROW_WIDTH (34), kept in the array
# summary (the script prints it last) and appended to the file $SUMMARY at once, so a run cut short
# still leaves it.
summary=()
row() {
  local line
  line=$(printf '%-*s %s' "${ROW_WIDTH:-34}" "$1" "$2")
  summary+=("$line")
  echo "$line" >> "$SUMMARY"
}

elapsed() { echo "$(( $(date +%s) - t0 ))s"; }

# stamp TEXT: a line of $LOG/summary.txt, after the seconds since the start, also on stdout; written
# at once, so a call cut short keeps what ran.
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$LOG/summary.txt"; }

# gpu_build NAME "TARGET ..." [CMAKE_FLAG ...]: configures $BUILD (Release, Ninja, CUDA for sm_90,
# and the flags) and builds the targets (all of them where the list is empty) with $JOBS jobs (16),
# logging both to $LOG/NAME.log. On failure it prints the log's errors, stamps what failed and
# exits 1.
gpu_build() {
  local log=$LOG/$1.log targets=$2
  shift 2
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 "$@" > "$log" 2>&1; then
    tail -30 "$log"
    stamp "configure FAILED (see $log)"
    exit 1
  fi
  # shellcheck disable=SC2086  # the targets are words
  if ! cmake --build "$BUILD" -j "${JOBS:-16}" ${targets:+--target $targets} >> "$log" 2>&1; then
    grep -E "error|Error" "$log" | head -30
    stamp "build FAILED (see $log)"
    exit 1
  fi
}
