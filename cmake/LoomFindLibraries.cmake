# The libraries without a CMake package of their own that loom links: Gloo (Debian's libgloo-dev),
# cuDNN and NCCL (beside the CUDA toolkit). Each found one becomes an imported target carrying
# its header folder, its library and the LOOM_WITH_* define of the code that uses it. Included by
# loom's own build (cmake/LoomDependencies.cmake) and by the installed loomConfig.cmake, so a
# consumer of the package finds them the same way. Leaves out: the CUDA toolkit (CUDAToolkit).
#
#   loom_find_gloo()   -> loom::gloo  (when found)
#   loom_find_cuda_libraries()   -> loom::cudnn (required), loom::nccl (when found); call after
#                                   find_package(CUDAToolkit)

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
