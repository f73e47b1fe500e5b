# `cmake --install` and cpack: the library, its headers under <prefix>/include/loom/, loomrun, and
# the CMake package (loomConfig.cmake, loomConfigVersion.cmake, loomTargets.cmake) under
# <prefix>/lib/cmake/loom/, so that find_package(loom 0.2) + loom::loom gives a user the include
# path, the defines and every library loom needs. Leaves out: tests, examples and benchmarks.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(LOOM_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/loom)

# ---------------------------------------------------------------- headers
# Every header of the library floors; kernels/cpu and kernels/cuda are private to kernels/ (no
# header above it includes them) and stay out, as do the launcher's (a program, not the library).
foreach(_loom_floor ${LOOM_FLOORS})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_loom_floor}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom
          FILES_MATCHING PATTERN "*.h" PATTERN "*.inc"
          PATTERN "launcher" EXCLUDE PATTERN "cpu" EXCLUDE PATTERN "cuda" EXCLUDE)
endforeach()
# core/cuda/: the CUDA runtime's headers need the toolkit's, except the two every build has.
if(LOOM_CUDA)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/cuda DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom/core
          FILES_MATCHING PATTERN "*.h")
else()
  install(FILES ${PROJECT_SOURCE_DIR}/core/cuda/available.h ${PROJECT_SOURCE_DIR}/core/cuda/device_info.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom/core/cuda)
endif()
install(FILES ${PROJECT_SOURCE_DIR}/include/loom/loom.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom)
# See Note [Include paths]: the installed headers include each other as "loom/core/tensor.h".
install(CODE "set(LOOM_INSTALLED_INCLUDE_DIR \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}/loom\")
set(LOOM_FLOORS \"${LOOM_FLOORS}\")")
install(SCRIPT ${CMAKE_CURRENT_LIST_DIR}/LoomRewriteIncludes.cmake)

# ---------------------------------------------------------------- the library and its package
install(TARGETS loom EXPORT loomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT loomTargets NAMESPACE loom:: DESTINATION ${LOOM_INSTALL_CMAKEDIR})

# What loomConfig.cmake must find again on the user's machine: what this build linked.
set(LOOM_PACKAGE_WITH_GLOO OFF)
if(TARGET loom::gloo)
  set(LOOM_PACKAGE_WITH_GLOO ON)
endif()
set(LOOM_PACKAGE_WITH_OPENBLAS OFF)
if(TARGET loom::openblas)
  set(LOOM_PACKAGE_WITH_OPENBLAS ON)
endif()
set(LOOM_PACKAGE_WITH_NCCL OFF)
if(LOOM_CUDA AND TARGET loom::nccl)
  set(LOOM_PACKAGE_WITH_NCCL ON)
endif()
set(LOOM_PACKAGE_CUDA_ROOT "")
if(LOOM_CUDA)
  get_filename_component(LOOM_PACKAGE_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/loomConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/loomConfig.cmake
                              INSTALL_DESTINATION ${LOOM_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/loomConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/loomConfig.cmake ${PROJECT_BINARY_DIR}/loomConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/LoomFindLibraries.cmake
        DESTINATION ${LOOM_INSTALL_CMAKEDIR})

# ---------------------------------------------------------------- cpack: .deb and .tar.gz
include(${CMAKE_CURRENT_LIST_DIR}/LoomPackaging.cmake)
