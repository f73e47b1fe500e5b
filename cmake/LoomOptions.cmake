# Build options of loom.
include(CheckLanguage)

# LOOM_CUDA: on when nvcc is found (compiles the CUDA backend), off for a CPU-only build.
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(_loom_cuda_default ON)
else()
  set(_loom_cuda_default OFF)
endif()
option(LOOM_CUDA "Build the CUDA backend" ${_loom_cuda_default})
# The programs around the library. On when loom is the top-level project, off when another
# project pulls it in with add_subdirectory (docs/using-loom.md); with all four off the build
# needs only the library's own dependencies (no CLI11, GoogleTest or Google Benchmark).
option(LOOM_BUILD_EXAMPLES "Build the example programs (needs CLI11)" ${PROJECT_IS_TOP_LEVEL})
option(LOOM_BUILD_LAUNCHER "Build loomrun, the launcher (needs CLI11)" ${PROJECT_IS_TOP_LEVEL})
option(LOOM_BUILD_TESTS "Build the tests (needs GoogleTest, the examples and loomrun)"
       ${PROJECT_IS_TOP_LEVEL})
option(LOOM_BUILD_BENCHMARKS "Build the benchmarks (needs Google Benchmark and the examples)"
       ${PROJECT_IS_TOP_LEVEL})
option(LOOM_INSTALL "Install rules for the library, headers and CMake package" ${PROJECT_IS_TOP_LEVEL})
option(LOOM_LIBTORCH "Build benchmarks/libtorch, the libtorch twin of bench_train (needs Torch)" OFF)
option(LOOM_OPENBLAS "Compute CPU matrix products with OpenBLAS when it is found (else Eigen)" ON)
option(LOOM_NATIVE "Compile the CPU code for this machine's instruction set (-march=native)" ON)
option(LOOM_WERROR "Treat warnings as errors" OFF)
# LOOM_UNITY_BUILD: the library's .cpp files compiled in batches of LOOM_UNITY_BATCH, one
# translation unit each (cmake/LoomUnity.cmake; the sanitizer builds of scripts/sanitize.sh).
option(LOOM_UNITY_BUILD "Compile the library's .cpp files in batches (unity build)" OFF)
set(LOOM_UNITY_BATCH 8 CACHE STRING "Files in one batch of the unity build")
# LOOM_SANITIZE: build everything under sanitizers ("address,undefined" or "thread"; see
# docs/reliability.md and scripts/sanitize.sh). LOOM_FUZZ: the libFuzzer harnesses of tests/fuzz
# (clang only; best combined with LOOM_SANITIZE=address,undefined).
set(LOOM_SANITIZE "" CACHE STRING "Sanitizers to build with: address,undefined | thread | empty")
option(LOOM_FUZZ "Build the libFuzzer harnesses (tests/fuzz, needs clang)" OFF)
if(LOOM_SANITIZE)
  if(NOT LOOM_SANITIZE MATCHES "^(address|undefined|address,undefined|undefined,address|thread)$")
    message(FATAL_ERROR "LOOM_SANITIZE=${LOOM_SANITIZE}: expected address,undefined or thread")
  endif()
  # -fno-sanitize-recover: an undefined-behaviour report fails the test instead of scrolling by.
  # -fno-sanitize=vptr: UBSan's vptr check needs RTTI of every library (GoogleTest's and Gloo's
  # Debian builds are not instrumented and trip it spuriously across the library boundary).
  add_compile_options(-fsanitize=${LOOM_SANITIZE} -fno-omit-frame-pointer -g1)
  # The debug info names the build folder "." instead of its absolute path. With -g, ccache hashes
  # the folder a file compiles in (its hash_dir), unless base_dir covers it and this option is
  # given: without it another checkout (a fresh CI clone, a worktree) compiled every sanitizer
  # object again although ccache held them (docs/ci.md). Reports still name the files, relative
  # to the build folder ("../core/tensor.cpp" where ccache's base_dir made the paths relative).
  add_compile_options(-fdebug-prefix-map=${CMAKE_BINARY_DIR}=.)
  # -Wno-pass-failed: the instrumentation can keep clang from vectorising an `omp simd` loop it was
  # asked to ("loop not vectorized: the optimizer was unable to perform the requested
  # transformation"): UBSan checks every p[i] for pointer overflow, a branch per element, and
  # TSan's instrumented loads did the same to kernels/cpu/cpu_norm.cpp's row sums at -O1 on an
  # AVX-512 Xeon (CI, 2026-12-02). The loops are right and vectorise in the uninstrumented builds,
  # where the warning stays an error (LOOM_WERROR); in a sanitizer build a slow loop costs nothing.
  add_compile_options($<$<COMPILE_LANG_AND_ID:CXX,Clang>:-Wno-pass-failed>)
  add_link_options(-fsanitize=${LOOM_SANITIZE})
  if(LOOM_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=all -fno-sanitize=vptr)
    add_link_options(-fno-sanitize-recover=all -fno-sanitize=vptr)
  endif()
endif()
if(LOOM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "LOOM_FUZZ=ON needs clang (libFuzzer): CXX=clang++ scripts/configure.sh")
  endif()
  # libFuzzer's coverage instrumentation (-fsanitize=fuzzer-no-link) only where the harnesses'
  # inputs are parsed: these library files (the root CMakeLists.txt sets it on them) and the
  # harnesses themselves (tests/fuzz/CMakeLists.txt); only the harnesses link libFuzzer's main().
  # The rest of the library, the programs and the tests are ASan+UBSan-instrumented as before
  # but not coverage-instrumented: the fuzzer gains nothing from edges in kernels it never
  # reaches, and they cost compile time and a callback at every branch and comparison in the
  # ASan tests (docs/ci.md has the measurement).
  set(LOOM_FUZZ_INSTRUMENTED core/safetensors.cpp core/crc32c.cpp nn/checkpoint.cpp data/mnist.cpp
                             distributed/store/store_protocol.cpp data/bpe_tokenizer.cpp
                             data/bpe_merges.cpp data/bpe_regex.cpp data/metaspace.cpp
                             data/special_token_matcher.cpp data/unicode_text.cpp)
endif()
if(LOOM_BUILD_TESTS AND NOT (LOOM_BUILD_EXAMPLES AND LOOM_BUILD_LAUNCHER))
  message(FATAL_ERROR "LOOM_BUILD_TESTS=ON needs LOOM_BUILD_EXAMPLES=ON and LOOM_BUILD_LAUNCHER=ON "
                      "(the tests run the example programs under loomrun)")
endif()
if(LOOM_BUILD_BENCHMARKS AND NOT LOOM_BUILD_EXAMPLES)
  message(FATAL_ERROR "LOOM_BUILD_BENCHMARKS=ON needs LOOM_BUILD_EXAMPLES=ON (bench_train trains "
                      "the examples' models)")
endif()

if(LOOM_CUDA)
  # A short default list: Ampere (80) and Hopper (90, H100/H200). Override with
  # -DCMAKE_CUDA_ARCHITECTURES=90 for one architecture (CI does, to build faster).
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  # CMake before 3.26 does not know nvcc's C++20 flag (Debian 12 ships 3.25): tell it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  string(APPEND CMAKE_CUDA_FLAGS " --expt-relaxed-constexpr --extended-lambda -Xcompiler=-Wall")
endif()

function(loom_set_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  if(LOOM_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(LOOM_NATIVE)
    # -mprefer-vector-width=256: GCC 12.2 with AVX-512 auto-vectorisation was seen to build wrong
    # constants (std::vector<int64_t>{1,1,1,1,0,0,0,0} came out all ones at -O2/-O3); 256-bit
    # auto-vectorisation avoids it, and Eigen still uses its AVX-512 kernels.
    # -Wno-maybe-uninitialized: GCC 12's own avx512fintrin.h trips it inside Eigen's GEMM (a
    # false positive in the compiler's header, hundreds of lines per build).
    target_compile_options(${target} PRIVATE
                           $<$<COMPILE_LANGUAGE:CXX>:-march=native -mprefer-vector-width=256>)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
    endif()
  endif()
endfunction()
