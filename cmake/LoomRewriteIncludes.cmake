# Install step (cmake/LoomInstall.cmake): in the installed headers, `#include "core/tensor.h"`
# becomes `#include "loom/core/tensor.h"` for every floor, so that <prefix>/include alone is on a
# user's include path (Note [Include paths] in CMakeLists.txt). Needs LOOM_INSTALLED_INCLUDE_DIR
# and LOOM_FLOORS. Leaves out: system includes (<...>), which stay as they are.
if(NOT LOOM_INSTALLED_INCLUDE_DIR OR NOT LOOM_FLOORS)
  message(FATAL_ERROR "LoomRewriteIncludes.cmake: LOOM_INSTALLED_INCLUDE_DIR and LOOM_FLOORS must be set")
endif()
string(REPLACE ";" "|" _floors "${LOOM_FLOORS}")
file(GLOB_RECURSE _headers "${LOOM_INSTALLED_INCLUDE_DIR}/*.h" "${LOOM_INSTALLED_INCLUDE_DIR}/*.inc")
set(_count 0)
foreach(_h ${_headers})
  file(READ "${_h}" _text)
  string(REGEX REPLACE "#([ \t]*)include([ \t]*)\"(${_floors})/" "#\\1include\\2\"loom/\\3/"
         _new "${_text}")
  if(NOT _new STREQUAL _text)
    file(WRITE "${_h}" "${_new}")
    math(EXPR _count "${_count} + 1")
  endif()
endforeach()
message(STATUS "Rewrote the includes of ${_count} headers in ${LOOM_INSTALLED_INCLUDE_DIR}")
