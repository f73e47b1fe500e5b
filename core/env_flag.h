// env_flag: an on/off switch read from the environment (LOOM_SDPA_PLAN_LOG=1 and the like).
// Leaves out: values that are numbers or names (their readers parse them where they are used).
#pragma once

#include <cstdlib>

namespace loom {

// True when the variable is set to something other than "" or a word starting with '0'.
inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && *v != '0';
}

}  // namespace loom
