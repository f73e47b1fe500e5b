# Third-party libraries loom builds on (all from Debian packages on the development machines;
# see the README's first command). The library needs Threads, OpenMP, Eigen, zlib, nlohmann-json
# PCRE2 and utf8proc (OpenBLAS, Gloo, CUDA, cuDNN, NCCL when present); the programs and tests add CLI11,
# GoogleTest and Google Benchmark, looked for only when they are built (LOOM_BUILD_*).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
include(${CMAKE_CURRENT_LIST_DIR}/LoomFindLibraries.cmake)
# loom_say_found(TARGET FOUND MISSING): the status line FOUND when TARGET exists, else MISSING.
function(loom_say_found target found missing)
  if(TARGET ${target})
    message(STATUS "${found}")
  else()
    message(STATUS "${missing}")
  endif()
endfunction()
# loom_require(TARGET MESSAGE...): stops the configure with the message (its pieces joined, as
# message() joins them) unless TARGET exists.
function(loom_require target)
  if(NOT TARGET ${target})
    list(JOIN ARGN "" _text)
    message(FATAL_ERROR "${_text}")
  endif()
endfunction()
# PCRE2 (Debian's libpcre2-dev): the BPE tokenizers' pre-tokenizer regexes (data/bpe_regex.h).
loom_find_pcre2()
loom_require(loom::pcre2 "PCRE2 not found (pcre2.h, libpcre2-8): the BPE tokenizers need it; on "
                         "Debian: apt-get install libpcre2-dev (scripts/install-deps.sh does)")
# utf8proc (Debian's libutf8proc-dev): the WordPiece tokenizer's Unicode (data/unicode_text.h).
loom_find_utf8proc()
loom_require(loom::utf8proc "utf8proc not found (utf8proc.h, libutf8proc): the WordPiece tokenizer "
                            "needs it; on Debian: apt-get install libutf8proc-dev "
                            "(scripts/install-deps.sh does)")

if(LOOM_BUILD_EXAMPLES OR LOOM_BUILD_BENCHMARKS OR LOOM_BUILD_LAUNCHER)
  find_package(CLI11 QUIET)
  if(NOT CLI11_FOUND AND NOT TARGET CLI11::CLI11)
    find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
    add_library(CLI11::CLI11 INTERFACE IMPORTED)
    target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
  endif()
endif()
# Gloo (Debian's libgloo-dev): the CPU collectives of loom::distributed. Optional: without it
# (the GPU machine) only NCCL is built. loom::gloo carries LOOM_WITH_GLOO for the code that uses it.
loom_find_gloo()
loom_say_found(loom::gloo "Gloo: ${GLOO_LIBRARY}"
               "Gloo not found: the CPU (gloo) process group is not built")
# OpenBLAS: the CPU GEMMs (Note [CPU GEMM]). Optional: without it Eigen's GEMM computes them.
if(LOOM_OPENBLAS)
  loom_find_openblas()
endif()
loom_say_found(loom::openblas "OpenBLAS: ${OPENBLAS_LIBRARY} (CPU matrix products)"
               "OpenBLAS not used: CPU matrix products run on Eigen's GEMM")
if(LOOM_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(LOOM_BUILD_BENCHMARKS)
  find_package(benchmark QUIET)
  if(NOT benchmark_FOUND)
    message(STATUS "Google Benchmark not found: benchmarks are not built")
    set(LOOM_BUILD_BENCHMARKS OFF)
  endif()
endif()

if(LOOM_CUDA)
  find_package(CUDAToolkit REQUIRED)
  # loom::cudnn (required with CUDA) and loom::nccl (optional: multi-GPU communication).
  loom_find_cuda_libraries()
  loom_require(loom::cudnn "cuDNN not found (cudnn.h, libcudnn) beside CUDA ${CUDAToolkit_VERSION} "
                           "in ${CUDAToolkit_LIBRARY_DIR}: install it, or configure with -DLOOM_CUDA=OFF")
  loom_say_found(loom::nccl "NCCL: ${NCCL_LIBRARY}"
                 "NCCL not found: multi-GPU communication is not built")
  # cuDNN's C++ frontend (optional, header-only): the fused flash attention on CUDA.
  set(LOOM_CUDNN_FRONTEND_DIR "" CACHE PATH
      "cuDNN's C++ frontend: the folder holding cudnn_frontend.h (or the folder above it)")
  loom_find_cudnn_frontend()
  if(LOOM_CUDNN_FRONTEND_INCLUDE_DIR)
    message(STATUS "cuDNN frontend ${LOOM_CUDNN_FRONTEND_VERSION}: ${LOOM_CUDNN_FRONTEND_INCLUDE_DIR} "
                   "(flash attention through cuDNN's SDPA graph)")
  else()
    message(STATUS "cuDNN frontend not found: no fused flash attention on CUDA, the attention op "
                   "runs its composite (scripts/install-deps.sh fetches the headers into "
                   "third_party/cudnn_frontend, or set -DLOOM_CUDNN_FRONTEND_DIR=...)")
  endif()
endif()
