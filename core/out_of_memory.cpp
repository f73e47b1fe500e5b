// The message of loom::OutOfMemoryError (Note [Out of memory]).
// Leaves out: gathering the numbers (each allocator does).
#include "core/out_of_memory.h"

#include <cstdio>
#include <utility>

namespace loom {

// Note [Out of memory]
// An allocation that fails is one error, not a crash: the message says what was asked, what the
// allocator holds (live, reserved, the largest free cached block: much reserved but a small
// largest block is fragmentation), the peak so far, and what makes a run fit. The CUDA allocator
// first empties its cache and retries once; the numbers are taken after that retry. Programs
// print it through train::run_main and exit with status 1; nothing is saved on that path, so a
// checkpoint written earlier is untouched. The CPU allocator raises the same error above
// LOOM_CPU_MEMORY_LIMIT (core/allocator.h), which is how the tests simulate the failure.

namespace {

constexpr const char* kAdvice =
    "To fit: a smaller --batch-size, --grad-accum K (the same batch as K micro-batches, 1/K of "
    "the activations), --amp bf16, --activation-checkpointing (train_gpt), --zero 2 (under "
    "loomrun: optimizer state and gradients sharded over the processes)";

std::string cuda_message(const OutOfMemoryNumbers& n) {
  std::string m = "CUDA out of memory on " + n.device + ": tried to allocate " +
                  format_bytes(n.requested) + "; the caching allocator holds " +
                  format_bytes(n.allocated) + " allocated, " + format_bytes(n.reserved) +
                  " reserved (largest free block " + format_bytes(n.largest_free_block) +
                  "), peak " + format_bytes(n.peak_allocated) + " in this run; the device has ";
  m += n.device_total ? format_bytes(n.device_free) + " free of " + format_bytes(n.device_total)
                      : std::string("? free (not asked during a CUDA graph capture)");
  return m + " (" + n.cause + "). " + kAdvice;
}

std::string cpu_message(const OutOfMemoryNumbers& n) {
  std::string m = "CPU out of memory: tried to allocate " + format_bytes(n.requested) +
                  "; the CPU allocator holds " + format_bytes(n.allocated) + " live, peak " +
                  format_bytes(n.peak_allocated) + " in this run; ";
  m += n.limit ? "the CPU memory limit is " + format_bytes(n.limit) +
                     " (LOOM_CPU_MEMORY_LIMIT or set_cpu_memory_limit)"
               : "the machine has no more (" + n.cause + ")";
  return m + ". " + kAdvice;
}

}  // namespace

OutOfMemoryError::OutOfMemoryError(OutOfMemoryNumbers numbers)
    : Error(out_of_memory_message(numbers)), numbers_(std::move(numbers)) {}

std::string out_of_memory_message(const OutOfMemoryNumbers& n) {
  return n.device == "cpu" ? cpu_message(n) : cuda_message(n);
}

std::string format_bytes(size_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  char buf[32];
  if (u == 0 || v >= 100)
    std::snprintf(buf, sizeof buf, "%.0f %s", v, units[u]);
  else
    std::snprintf(buf, sizeof buf, v >= 10 ? "%.1f %s" : "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace loom
