#!/usr/bin/env bash
# gpu-deps.sh: copies the two libraries loom needs that the GPU machine lacks (PCRE2's and
# utf8proc's headers and shared libraries; seen 2026-12-05: only PCRE2's runtime library is there)
# from this machine (scripts/install-deps.sh installs them) into the git-ignored .data/gpu-deps,
# for a GPU call to carry. scripts/gpu-check.sh then sets LOOM_DEPS_DIR (CMake looks there first,
# cmake/LoomFindLibraries.cmake) and LD_LIBRARY_PATH. Copies, not links: a call carries files only.
#
#   scripts/gpu-deps.sh        # then carry .data/gpu-deps with the call
set -euo pipefail
cd "$(dirname "$0")/.."
D=.data/gpu-deps
L=/usr/lib/x86_64-linux-gnu
mkdir -p "$D/include" "$D/lib"
cp /usr/include/pcre2.h /usr/include/utf8proc.h "$D/include/"
for lib in libpcre2-8.so.0 libutf8proc.so.2; do
  cp -L "$L/$lib" "$D/lib/$lib"                     # the name the programs load (the SONAME)
  cp -L "$L/$lib" "$D/lib/${lib%.so.*}.so"          # the name the linker looks for
done
du -sh "$D"
