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

# PCRE2, 8-bit code units, with its JIT: the pre-tokenizer regexes of the BPE tokenizers
# (data/bpe_regex.cpp, the only file that includes PCRE2's header; it defines
# PCRE2_CODE_UNIT_WIDTH).
# libloom is static, so a program that links it links libpcre2-8 too: the exported target names
# loom::pcre2, which loomConfig.cmake makes again here.
function(loom_find_pcre2)
  if(TARGET loom::pcre2)
    return()
  endif()
  find_path(PCRE2_INCLUDE_DIR pcre2.h HINTS $ENV{LOOM_DEPS_DIR}/include)
  find_library(PCRE2_LIBRARY pcre2-8 HINTS $ENV{LOOM_DEPS_DIR}/lib)
  if(PCRE2_INCLUDE_DIR AND PCRE2_LIBRARY)
    add_library(loom::pcre2 INTERFACE IMPORTED GLOBAL)
    set_target_properties(loom::pcre2 PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${PCRE2_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${PCRE2_LIBRARY}")
  endif()
endfunction()

# utf8proc: the Unicode tables of the WordPiece tokenizer (data/unicode_text.cpp, the only file that
# includes its header): categories, canonical decomposition, lowercase. Static loom: as PCRE2.
function(loom_find_utf8proc)
  if(TARGET loom::utf8proc)
    return()
  endif()
  find_path(UTF8PROC_INCLUDE_DIR utf8proc.h HINTS $ENV{LOOM_DEPS_DIR}/include)
  find_library(UTF8PROC_LIBRARY utf8proc HINTS $ENV{LOOM_DEPS_DIR}/lib)
  if(UTF8PROC_INCLUDE_DIR AND UTF8PROC_LIBRARY)
    add_library(loom::utf8proc INTERFACE IMPORTED GLOBAL)
    set_target_properties(loom::utf8proc PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${UTF8PROC_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${UTF8PROC_LIBRARY}")
  endif()
endfunction()

function(loom_find_gloo)
  if(TARGET loom::gloo)
    return()
  endif()
  find_path(GLOO_INCLUDE_DIR gloo/config.h)
  find_library(GLOO_LIBRARY gloo)
  if(GLOO_INCLUDE_DIR AND GLOO_LIBRARY)
    find_package(Threads REQUIRED)
    add_library(loom::gloo INTERFACE IMPORTED GLOBAL)
    set_target_properties(loom::gloo PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${GLOO_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${GLOO_LIBRARY};Threads::Threads"
      INTERFACE_COMPILE_DEFINITIONS LOOM_WITH_GLOO=1)
  endif()
endfunction()

# OpenBLAS computes the CPU backend's matrix products when found (kernels/cpu/cpu_gemm.cpp, Note
# [CPU GEMM]). Debian installs each threading flavour in its own folder; the OpenMP one is looked
# for first, since it shares loom's OpenMP runtime (loom runs OpenBLAS on one thread per call in
# any case). cblas.h must come from OpenBLAS, not the reference BLAS: openblas_config.h sits
# beside it.
function(loom_find_openblas)
  if(TARGET loom::openblas)
    return()
  endif()
  set(_dirs /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp)
  find_path(OPENBLAS_INCLUDE_DIR openblas_config.h
            PATH_SUFFIXES openblas-openmp openblas
            HINTS /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu)
  find_library(OPENBLAS_LIBRARY NAMES openblas HINTS ${_dirs})
  if(OPENBLAS_INCLUDE_DIR AND OPENBLAS_LIBRARY AND EXISTS "${OPENBLAS_INCLUDE_DIR}/cblas.h")
    add_library(loom::openblas INTERFACE IMPORTED GLOBAL)
    set_target_properties(loom::openblas PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${OPENBLAS_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${OPENBLAS_LIBRARY}"
      INTERFACE_COMPILE_DEFINITIONS LOOM_WITH_OPENBLAS=1)
  endif()
endfunction()

function(loom_find_cuda_libraries)
  find_path(CUDNN_INCLUDE_DIR cudnn.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/include/x86_64-linux-gnu)
  find_library(CUDNN_LIBRARY cudnn
               HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY AND NOT TARGET loom::cudnn)
    add_library(loom::cudnn INTERFACE IMPORTED GLOBAL)
    set_target_properties(loom::cudnn PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${CUDNN_LIBRARY}")
  endif()
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND NOT TARGET loom::nccl)
    add_library(loom::nccl INTERFACE IMPORTED GLOBAL)
    set_target_properties(loom::nccl PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${NCCL_LIBRARY}"
      INTERFACE_COMPILE_DEFINITIONS LOOM_WITH_NCCL=1)
  endif()
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
