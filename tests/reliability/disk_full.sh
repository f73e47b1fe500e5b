#!/usr/bin/env bash
# A full disk while saving: train_mlp saves a checkpoint after every step into a 1 MiB tmpfs (in a
# private mount namespace: `unshare -rm`, or `unshare -m` as root), which holds two checkpoints of
# the tiny run but not a third. The save that does not fit must be an error naming the file and
# the cause, leave no temporary file behind, and leave the previous checkpoint loadable (--resume
# continues from it). Skipped (exit 77) where no mount namespace can be made.
#   tests/reliability/disk_full.sh <build folder>
build=$1
if [ -z "${LOOM_IN_NS:-}" ]; then  # first into a private mount namespace, then everything else
  for how in "unshare -rm" "unshare -m"; do
    if $how true 2>/dev/null; then
      LOOM_IN_NS=1 exec $how bash "$0" "$build"
    fi
  done
  echo "skipped: cannot create a mount namespace here (unshare -rm and unshare -m both fail)"
  exit 77
fi
source "$(dirname "$0")/lib.sh"
need "$mlp" "$data/train-images-idx3-ubyte.gz"
small_data "$tmp/data" 1024 1000
read -r -a args <<<"$(mlp_args)"

disk=$tmp/disk
mkdir -p "$disk"
mount -t tmpfs -o size=1m tmpfs "$disk" ||
  { echo "skipped: cannot mount a tmpfs in this namespace"; exit 77; }
"$mlp" "${args[@]}" --checkpoint-dir "$disk/ckpt" --checkpoint-every 1 --keep-last 3 \
  >"$tmp/full.out" 2>"$tmp/full.err"
rc=$?
err=$(cat "$tmp/full.err")
[ $rc -eq 1 ] && ok "the run stopped with exit 1 when the disk filled" || bad "exit $rc (want 1)"
if grep -qE "train_mlp: error: writing '$disk/ckpt/ckpt-[0-9]+\.safetensors': .*No space left on device" <<<"$err"; then
  ok "the error names the file and the cause: $err"
else
  bad "unclear error: $err"
fi
left=$(ls "$disk/ckpt" | grep -c '\.tmp\.')
[ "$left" -eq 0 ] && ok "no temporary file left on the full disk" || bad "$left temporary files left"
saved=$(ls "$disk/ckpt" | grep -c '^ckpt-')
prev=$(newest "$disk/ckpt")
[ "$saved" -ge 1 ] && ok "$saved earlier checkpoint(s) kept, newest $(basename "$prev")" ||
  bad "no earlier checkpoint kept"
# The previous checkpoint loads: a resumed run starts from it (and fails again at the next save).
"$mlp" "${args[@]}" --checkpoint-dir "$disk/ckpt" --checkpoint-every 1 --resume \
  >"$tmp/resume.out" 2>"$tmp/resume.err"
if grep -qF "resumed from $prev " "$tmp/resume.out" && ! grep -q skipping "$tmp/resume.err"; then
  ok "--resume loads $(basename "$prev") from the full disk"
else
  bad "--resume did not load $prev: $(cat "$tmp/resume.out" "$tmp/resume.err" | tail -n 3)"
fi
# With room again (a copy on the ordinary disk), the run resumes and completes.
cp -r "$disk/ckpt" "$tmp/room"
"$mlp" "${args[@]}" --checkpoint-dir "$tmp/room" --resume >"$tmp/room.out" 2>&1 &&
  ok "with room again the run resumes from $(basename "$prev") and completes" ||
  bad "the run on a disk with room failed: $(tail -n 3 "$tmp/room.out")"
umount "$disk"
finish
