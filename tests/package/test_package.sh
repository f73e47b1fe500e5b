#!/usr/bin/env bash
# loom as a package, from a user's side: builds and runs tests/package/consumer (a program that
# sees loom only through find_package/add_subdirectory, loom::loom and <loom/loom.h>).
#
#   test_package.sh install BUILD WORK   cmake --install BUILD into WORK/prefix, then the consumer
#                                        with find_package(loom 0.2) (ctest runs this one)
#   test_package.sh subdirectory WORK [BUILD]   the consumer with loom's sources added by
#                                        add_subdirectory, a library-only loom build, built in WORK
#                                        itself: with BUILD's settings (ccache serves it from
#                                        BUILD's compile when WORK is beside BUILD, e.g.
#                                        build-package-subdirectory next to build), else CPU-only
#                                        at -O0 (CI runs this one)
#   test_package.sh deb BUILD WORK       cpack's .deb of BUILD, installed with dpkg -i (root), the
#                                        consumer built against /usr, then the package removed (CI)
# Leaves out: the .tar.gz (the same files as the install prefix) and running on a GPU.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mode=${1:?usage: test_package.sh install|subdirectory|deb ...}
shift

gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Without nvcc on PATH, CMake's FindCUDAToolkit still looks in /usr/local/cuda.
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=$PATH:/usr/local/cuda/bin

# subdirectory_settings [BUILD]: the consumer's settings for loom's options, one cmake argument a
# line. Given a build folder of this checkout and a working ccache, that build's own (compilers,
# CUDA and its architectures, warnings): every loom object then compiles with the command that build used, so ccache serves
# it and CI does not compile the library a second time. Otherwise a CPU-only loom at -O0: this
# checks that loom builds and links inside a user's tree, and -O0 took 136 s against 238 s for
# -O3 on a 2-core machine (the consumer's 200 small steps take a moment).
subdirectory_settings() {
  local build=$1 cache key value
  if [ -z "$build" ] || ! command -v ccache >/dev/null || [ -n "${CCACHE_DISABLE:-}" ]; then
    printf '%s\n' -DLOOM_CUDA=OFF -DLOOM_NATIVE=OFF "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG"
    return
  fi
  cache=$build/CMakeCache.txt
  for key in CMAKE_CXX_COMPILER CMAKE_CUDA_COMPILER CMAKE_CUDA_ARCHITECTURES LOOM_CUDA LOOM_NATIVE \
             LOOM_OPENBLAS LOOM_WERROR CMAKE_CUDA_COMPILER_LAUNCHER; do
    value=$(sed -n "s/^$key:[A-Z]*=//p" "$cache")
    if [ -n "$value" ]; then echo "-D$key=$value"; fi
  done
}

# build_consumer WORK DIR [cmake args...]: configure and build the consumer in DIR (logs in WORK),
# then run it.
build_consumer() {
  local work=$1 dir=$2; shift 2
  cmake -S "$here/consumer" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
        "${launcher[@]}" "$@" >"$work/consumer-configure.log" 2>&1 \
    || { cat "$work/consumer-configure.log"; echo "test_package: configuring the consumer failed"; return 1; }
  cmake --build "$dir" -j"$(nproc)" >"$work/consumer-build.log" 2>&1 \
    || { tail -50 "$work/consumer-build.log"; echo "test_package: building the consumer failed"; return 1; }
  "$dir/consumer" "$work"
}

case "$mode" in
  install)
    build=$(cd "${1:?install: the loom build folder}" && pwd); work=${2:?install: a work folder}
    rm -rf "$work"; mkdir -p "$work"; work=$(cd "$work" && pwd)
    cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
    # Nothing of the source or build tree may leak into the package.
    if grep -rlE "$repo|$build" "$work/prefix/lib/cmake/loom" "$work/prefix/include"; then
      echo "test_package: the installed package names the source or build folder (above)"; exit 1
    fi
    [ -f "$work/prefix/include/loom/loom.h" ] || { echo "test_package: no include/loom/loom.h"; exit 1; }
    build_consumer "$work" "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix"
    ;;
  subdirectory)
    work=${1:?subdirectory: a work folder}
    if [ -n "${2:-}" ] && [ ! -f "$2/CMakeCache.txt" ]; then
      echo "test_package: $2 is not a configured build folder (no CMakeCache.txt)"; exit 1
    fi
    rm -rf "$work"; mkdir -p "$work"; work=$(cd "$work" && pwd)
    # Note [ccache and the consumer's folder]
    # Ninja runs every compile in the top build folder, and ccache with base_dir set (on the
    # development machine, /work) rewrites the absolute paths under it (the source file,
    # -I<checkout>, cuDNN's -isystem) relative to that folder before it hashes the command. Built
    # in WORK/consumer inside BUILD (as CI did until 2026-12-05) every loom file's path began
    # with three "../" where BUILD's compile had one: a different command, so ccache compiled all
    # of loom again (243 objects, 360 s on 2 cores). So the consumer's build folder is WORK
    # itself, and a WORK in the same folder as BUILD reaches the checkout by the same relative
    # path.
    if [ -n "${2:-}" ]; then
      build_parent=$(cd "$2/.." && pwd)
      if [ "$(dirname "$work")" != "$build_parent" ]; then
        echo "test_package: note: $work is not beside $2, so ccache (with base_dir) will not serve" \
             "loom's objects from that build's compile"
      fi
    fi
    # The library alone must configure without the programs' dependencies.
    mapfile -t settings < <(subdirectory_settings "${2:-}")
    build_consumer "$work" "$work" -DLOOM_SOURCE_DIR="$repo" "${settings[@]}" \
      -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON \
      -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON
    ;;
  deb)
    build=$(cd "${1:?deb: the loom build folder}" && pwd); work=${2:?deb: a work folder}
    rm -rf "$work"; mkdir -p "$work"; work=$(cd "$work" && pwd)
    [ "$(id -u)" -eq 0 ] || { echo "test_package: deb needs root (dpkg -i)"; exit 1; }
    (cd "$build" && cpack -G DEB -B "$work/cpack") >"$work/cpack.log" 2>&1 \
      || { cat "$work/cpack.log"; exit 1; }
    deb=$(ls "$work"/cpack/*.deb)
    dpkg-deb --info "$deb" | sed -n '/Package:/,/Description:/p'
    dpkg -i "$deb"
    trap 'dpkg -r libloom-dev >/dev/null' EXIT
    [ -f /usr/lib/cmake/loom/loomConfig.cmake ] || { echo "test_package: the .deb has no /usr/lib/cmake/loom"; exit 1; }
    build_consumer "$work" "$work/consumer"
    ;;
  *) echo "test_package: unknown mode $mode (install, subdirectory, deb)"; exit 2 ;;
esac
