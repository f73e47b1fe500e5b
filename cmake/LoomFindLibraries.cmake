# The libraries without a CMake package of their own that loom links: PCRE2 (Debian's
# libpcre2-dev), utf8proc (Debian's libutf8proc-dev), Gloo (Debian's libgloo-dev), OpenBLAS
# (Debian's libopenblas-openmp-dev), cuDNN and NCCL (beside the CUDA toolkit). Each found one
# becomes an imported target carrying its header folder, its library and the LOOM_WITH_* define of
# the code that uses it. Included by loom's own build (cmake/LoomDependencies.cmake) and by the
# installed loomConfig.cmake, so a consumer of the package finds them the same way. Leaves out: the CUDA toolkit (CUDAToolkit).
#
# PCRE2 and utf8proc are also looked for under $LOOM_DEPS_DIR/include and /lib first when that is
# set: the GPU machine has neither header, and scripts/gpu-deps.sh copies them there from here.
#   loom_find_pcre2()  -> loom::pcre2 (when found; loom requires it)
#   loom_find_utf8proc()  -> loom::utf8proc (when found; loom requires it)
#   loom_find_gloo()   -> loom::gloo  (when found)
#   loom_find_openblas()   -> loom::openblas (when found)
#   loom_find_cuda_libraries()   -> loom::cudnn (required), loom::nccl (when found); call after
#                                   find_package(CUDAToolkit)
#   loom_find_cudnn_frontend()   -> LOOM_CUDNN_FRONTEND_INCLUDE_DIR (when found; loom's own build
#                                   only: the frontend is header-only and compiled into loom)

# _loom_import_library(NAME VAR HEADER LIBRARY [CHECK_FILE f] [DEFINE D] [LINK ...]
#                      [PATH_SUFFIXES ...] [INCLUDE_HINTS ...] [LIBRARY_HINTS ...]) -> loom::NAME:
# looks for HEADER's folder (VAR_INCLUDE_DIR) and the library (VAR_LIBRARY) and, when both are
# found (and CHECK_FILE sits beside the header), makes the imported target: that folder, that
# library and LINK, and DEFINE=1 for the code that uses it. Does nothing when the target exists.
function(_loom_import_library name var header library)
  cmake_parse_arguments(ARG "" "CHECK_FILE;DEFINE"
                        "LINK;PATH_SUFFIXES;INCLUDE_HINTS;LIBRARY_HINTS" ${ARGN})
  if(TARGET loom::${name})
    return()
  endif()
  find_path(${var}_INCLUDE_DIR ${header} PATH_SUFFIXES ${ARG_PATH_SUFFIXES} HINTS ${ARG_INCLUDE_HINTS})
  find_library(${var}_LIBRARY NAMES ${library} HINTS ${ARG_LIBRARY_HINTS})
  set(_include "${${var}_INCLUDE_DIR}")
  if(NOT _include OR NOT ${var}_LIBRARY)
    return()
  endif()
  if(ARG_CHECK_FILE AND NOT EXISTS "${_include}/${ARG_CHECK_FILE}")
    return()
  endif()
  set(_link ${${var}_LIBRARY} ${ARG_LINK})
  add_library(loom::${name} INTERFACE IMPORTED GLOBAL)
  set_target_properties(loom::${name} PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_include}"
    INTERFACE_LINK_LIBRARIES "${_link}")
  if(ARG_DEFINE)
    set_target_properties(loom::${name} PROPERTIES INTERFACE_COMPILE_DEFINITIONS ${ARG_DEFINE}=1)
  endif()
endfunction()

# PCRE2, 8-bit code units, with its JIT: the pre-tokenizer regexes of the BPE tokenizers
# (data/bpe_regex.cpp, the only file that includes PCRE2's header; it defines
# PCRE2_CODE_UNIT_WIDTH).
# libloom is static, so a program that links it links libpcre2-8 too: the exported target names
# loom::pcre2, which loomConfig.cmake makes again here.
function(loom_find_pcre2)
  _loom_import_library(pcre2 PCRE2 pcre2.h pcre2-8
                       INCLUDE_HINTS $ENV{LOOM_DEPS_DIR}/include LIBRARY_HINTS $ENV{LOOM_DEPS_DIR}/lib)
endfunction()

# utf8proc: the Unicode tables of the WordPiece tokenizer (data/unicode_text.cpp, the only file that
# includes its header): categories, canonical decomposition, lowercase. Static loom: as PCRE2.
function(loom_find_utf8proc)
  _loom_import_library(utf8proc UTF8PROC utf8proc.h utf8proc
                       INCLUDE_HINTS $ENV{LOOM_DEPS_DIR}/include LIBRARY_HINTS $ENV{LOOM_DEPS_DIR}/lib)
endfunction()

function(loom_find_gloo)
  find_package(Threads REQUIRED)
  _loom_import_library(gloo GLOO gloo/config.h gloo LINK Threads::Threads DEFINE LOOM_WITH_GLOO)
endfunction()

# OpenBLAS computes the CPU backend's matrix products when found (kernels/cpu/cpu_gemm.cpp, Note
# [CPU GEMM]). Debian installs each threading flavour in its own folder; the OpenMP one is looked
# for first, since it shares loom's OpenMP runtime (loom runs OpenBLAS on one thread per call in
# any case). cblas.h must come from OpenBLAS, not the reference BLAS: openblas_config.h sits
# beside it.
function(loom_find_openblas)
  _loom_import_library(openblas OPENBLAS openblas_config.h openblas CHECK_FILE cblas.h
                       DEFINE LOOM_WITH_OPENBLAS PATH_SUFFIXES openblas-openmp openblas
                       INCLUDE_HINTS /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu
                       LIBRARY_HINTS /usr/lib/x86_64-linux-gnu/openblas-openmp
                                     /usr/lib/aarch64-linux-gnu/openblas-openmp)
endfunction()

function(loom_find_cuda_libraries)
  _loom_import_library(cudnn CUDNN cudnn.h cudnn
                       INCLUDE_HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/include/x86_64-linux-gnu
                       LIBRARY_HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  _loom_import_library(nccl NCCL nccl.h nccl DEFINE LOOM_WITH_NCCL
                       INCLUDE_HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include
                       LIBRARY_HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
endfunction()

# cuDNN's C++ frontend, header-only, with which kernels/cuda/attention/cudnn_sdpa.cpp builds the flash
# attention graphs (Note [Flash attention through cuDNN] in kernels/cuda/attention/cudnn_sdpa.h). Looked for in
# LOOM_CUDNN_FRONTEND_DIR (its include folder, or the folder above it) when set, then in
# third_party/cudnn_frontend/include, where scripts/install-deps.sh unpacks it from the PyPI wheel,
# then on the system's include path. LOOM_CUDNN_FRONTEND_VERSION: its version, e.g. 1.32.0.
function(loom_find_cudnn_frontend)
  find_path(LOOM_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
            HINTS ${LOOM_CUDNN_FRONTEND_DIR} ${LOOM_CUDNN_FRONTEND_DIR}/include
                  ${PROJECT_SOURCE_DIR}/third_party/cudnn_frontend/include)
  set(_version "")
  set(_header "${LOOM_CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h")
  if(LOOM_CUDNN_FRONTEND_INCLUDE_DIR AND EXISTS "${_header}")
    file(STRINGS "${_header}" _lines REGEX "#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION ")
    foreach(_part MAJOR MINOR PATCH)
      string(REGEX REPLACE ".*#define CUDNN_FRONTEND_${_part}_VERSION ([0-9]+).*" "\\1" _n "${_lines}")
      list(APPEND _version ${_n})
    endforeach()
    list(JOIN _version "." _version)
  endif()
  set(LOOM_CUDNN_FRONTEND_VERSION "${_version}" PARENT_SCOPE)
endfunction()
