# Third-party libraries loom builds on (all from Debian packages on the development machines;
# see the README's first command).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 QUIET)
if(NOT CLI11_FOUND)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()
# Gloo (Debian's libgloo-dev): the CPU collectives of loom::distributed. Optional: without it
# (the GPU machine) only NCCL is built. loom::gloo carries LOOM_WITH_GLOO for the code that uses it.
find_path(GLOO_INCLUDE_DIR gloo/config.h)
find_library(GLOO_LIBRARY gloo)
if(GLOO_INCLUDE_DIR AND GLOO_LIBRARY AND NOT TARGET loom::gloo)
  add_library(loom::gloo INTERFACE IMPORTED)
  set_target_properties(loom::gloo PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${GLOO_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${GLOO_LIBRARY};Threads::Threads"
    INTERFACE_COMPILE_DEFINITIONS LOOM_WITH_GLOO=1)
  message(STATUS "Gloo: ${GLOO_LIBRARY}")
elseif(NOT TARGET loom::gloo)
  message(STATUS "Gloo not found: the CPU (gloo) process group is not built")
endif()
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
  find_path(CUDNN_INCLUDE_DIR cudnn.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/include/x86_64-linux-gnu
            REQUIRED)
  find_library(CUDNN_LIBRARY cudnn
               HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu REQUIRED)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  # loom::nccl: NCCL's header and library, and LOOM_WITH_NCCL for the code that uses it.
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND NOT TARGET loom::nccl)
    add_library(loom::nccl INTERFACE IMPORTED)
    set_target_properties(loom::nccl PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${NCCL_LIBRARY}"
      INTERFACE_COMPILE_DEFINITIONS LOOM_WITH_NCCL=1)
    message(STATUS "NCCL: ${NCCL_LIBRARY}")
  else()
    message(STATUS "NCCL not found: multi-GPU communication is not built")
  endif()
endif()
