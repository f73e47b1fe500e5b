# cpack: a .deb and a .tar.gz of what `cmake --install` puts in a prefix (cmake/LoomInstall.cmake).
#   cmake --build build --target package      # or: cd build && cpack -G DEB
# The .deb installs into /usr and depends on the Debian packages of what loomConfig.cmake finds
# again (a user of the package builds against it). CUDA, cuDNN and NCCL come from NVIDIA's own
# installers on most machines, not Debian packages: a CUDA build of the .deb does not name them,
# and they must be installed where CMake's FindCUDAToolkit looks (docs/using-loom.md).
# Leaves out: a split into runtime and -dev packages (libloom is a static library).
set(CPACK_PACKAGE_NAME "libloom-dev")
set(CPACK_PACKAGE_VENDOR "loom")
set(CPACK_PACKAGE_CONTACT "loom developers <loom@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "loom: a small C++ framework for training neural networks on CPUs and CUDA GPUs")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR "TGZ;DEB")
set(CPACK_SOURCE_GENERATOR "")
set(CPACK_PACKAGE_FILE_NAME "loom-${PROJECT_VERSION}-Linux")
if(LOOM_CUDA)
  string(APPEND CPACK_PACKAGE_FILE_NAME "-cuda")
endif()
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "libdevel")
# What a user's build needs: the compiler's OpenMP, zlib's headers, PCRE2's and utf8proc's libraries
# (loomConfig.cmake finds them again), Gloo and OpenBLAS when this build used them, and cmake to
# read the package.
set(_loom_deb_depends "libgomp1, zlib1g-dev, libpcre2-dev, libutf8proc-dev, cmake (>= 3.24)")
if(TARGET loom::gloo)
  string(APPEND _loom_deb_depends ", libgloo-dev")
endif()
if(TARGET loom::openblas)
  string(APPEND _loom_deb_depends ", libopenblas-openmp-dev")
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${_loom_deb_depends}")
include(CPack)
