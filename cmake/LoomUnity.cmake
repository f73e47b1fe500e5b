# loom_unity_build(target batch): compiles the target's .cpp files in batches of `batch`, each
# batch one translation unit that includes its files, so the headers they share are parsed once a
# batch instead of once a file (LOOM_UNITY_BUILD=ON; scripts/sanitize.sh's builds use it, the
# numbers are in docs/ci.md). Leaves out: files with options or defines of their own, files marked
# SKIP_UNITY_BUILD_INCLUSION, and anything but .cpp (CUDA); they compile alone, as before.
#
# Note [Unity batches with relative includes]
# CMake's own unity build (CMAKE_UNITY_BUILD) writes each file's absolute path into the batch
# ('#include "/path/to/checkout/core/tensor.cpp"'): the batch's text and the preprocessor's line
# markers then differ for every checkout path, and ccache, which hashes both, misses for a clone
# at another path (its base_dir rewrites paths on the command line only). These batches include
# the files by their path in the repository ('#include "core/tensor.cpp"', found through the -I of
# the repository root), so a batch reads the same in every checkout. A batch's file is rewritten
# only when its list changes (file(CONFIGURE)), so a reconfigure rebuilds nothing.
function(loom_unity_build target batch)
  get_target_property(_sources ${target} SOURCES)
  set(_batches "")
  set(_members "")
  set(_text "")
  set(_count 0)
  foreach(_src IN LISTS _sources)
    get_source_file_property(_skip ${_src} SKIP_UNITY_BUILD_INCLUSION)
    get_source_file_property(_options ${_src} COMPILE_OPTIONS)
    get_source_file_property(_defines ${_src} COMPILE_DEFINITIONS)
    if(NOT _src MATCHES "\\.cpp$" OR _skip OR _options OR _defines)
      continue()
    endif()
    cmake_path(RELATIVE_PATH _src BASE_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE _rel)
    string(APPEND _text "#include \"${_rel}\"\n")
    list(APPEND _members ${_src})
    math(EXPR _count "${_count} + 1")
    if(_count EQUAL batch)
      list(LENGTH _batches _n)
      set(_file ${CMAKE_CURRENT_BINARY_DIR}/unity/${target}_${_n}.cpp)
      file(CONFIGURE OUTPUT ${_file} CONTENT "// A unity batch of ${target} (cmake/LoomUnity.cmake).\n${_text}")
      list(APPEND _batches ${_file})
      set(_text "")
      set(_count 0)
    endif()
  endforeach()
  if(_count GREATER 0)
    list(LENGTH _batches _n)
    set(_file ${CMAKE_CURRENT_BINARY_DIR}/unity/${target}_${_n}.cpp)
    file(CONFIGURE OUTPUT ${_file} CONTENT "// A unity batch of ${target} (cmake/LoomUnity.cmake).\n${_text}")
    list(APPEND _batches ${_file})
  endif()
  set_source_files_properties(${_members} PROPERTIES HEADER_FILE_ONLY ON)
  target_sources(${target} PRIVATE ${_batches})
endfunction()
