// The thread-local grad-mode flag.
#include "autograd/grad_mode.h"

namespace loom::autograd {

namespace {
thread_local bool g_grad_enabled = true;
}

bool is_grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }

}  // namespace loom::autograd
