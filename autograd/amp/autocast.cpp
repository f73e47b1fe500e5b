// The autocast scope's thread-local state, its cast cache, and the cast helpers the ops call
// (Note [Autocast policy], Note [Autocast cast cache] in autograd/amp/autocast.h).
// Leaves out: the choice of which op uses which helper (each op makes it, in autograd/ops).
#include "autograd/amp/autocast.h"

#include <atomic>
#include <map>
#include <tuple>

#include "autograd/grad_mode.h"
#include "autograd/ops/shape.h"

namespace loom::amp {

namespace {

struct CacheEntry {
  Tensor source;  // keeps the impl alive, so its address is not reused while cached
  uint64_t version = 0;
  Tensor cast;
};

struct State {
  std::optional<DType> dtype;
  int depth = 0;  // nested scopes; the cache is cleared when the outermost one ends
  int64_t casts = 0;
  std::map<std::tuple<const void*, DType, bool>, CacheEntry> cache;
};

std::atomic<bool> g_channels_last{true};

State& state() {
  thread_local State s;
  return s;
}

Tensor counted_cast(const Tensor& t, DType to_dtype) {
  ++state().casts;
  return to(t, to_dtype);
}

int width(DType t) {
  switch (t) {
    case DType::F64:
      return 3;
    case DType::F32:
      return 2;
    default:
      return 1;  // F16, BF16
  }
}

}  // namespace

Autocast::Autocast(std::optional<DType> dtype) : prev_(state().dtype) {
  LOOM_CHECK(!dtype || *dtype == DType::F16 || *dtype == DType::BF16,
             "Autocast: the dtype must be float16 or bfloat16, got ", dtype_name(*dtype));
  State& s = state();
  s.dtype = dtype;
  ++s.depth;
}

Autocast::~Autocast() {
  State& s = state();
  s.dtype = prev_;
  if (--s.depth == 0) s.cache.clear();
}

std::optional<DType> autocast_dtype() { return state().dtype; }

int64_t autocast_cast_count() { return state().casts; }

Tensor cast_lower(const Tensor& t) {
  State& s = state();
  if (!s.dtype || !t.defined() || t.dtype() != DType::F32) return t;
  const DType low = *s.dtype;
  if (!(t.is_leaf() && t.requires_grad())) return counted_cast(t, low);
  // A cast made under NoGradGuard has no graph edge: it serves only ungraphed uses.
  auto key = std::make_tuple(static_cast<const void*>(t.impl()), low, autograd::is_grad_enabled());
  auto it = s.cache.find(key);
  if (it != s.cache.end() && it->second.version == t.version()) return it->second.cast;
  Tensor cast = counted_cast(t, low);
  s.cache[key] = CacheEntry{t, t.version(), cast};
  return cast;
}

Tensor cast_fp32(const Tensor& t) {
  if (!state().dtype || !t.defined()) return t;
  if (t.dtype() != DType::F16 && t.dtype() != DType::BF16) return t;
  return counted_cast(t, DType::F32);
}

void promote(Tensor& a, Tensor& b) {
  if (!state().dtype || !a.defined() || !b.defined() || a.dtype() == b.dtype()) return;
  if (!is_floating(a.dtype()) || !is_floating(b.dtype())) return;
  const int wa = width(a.dtype()), wb = width(b.dtype());
  // f16 with bf16: neither holds the other, so both go to float32.
  const DType wide = wa > wb ? a.dtype() : wb > wa ? b.dtype() : DType::F32;
  if (a.dtype() != wide) a = counted_cast(a, wide);
  if (b.dtype() != wide) b = counted_cast(b, wide);
}

void set_channels_last_convolutions(bool on) { g_channels_last.store(on); }
bool channels_last_convolutions() { return g_channels_last.load(std::memory_order_relaxed); }

Tensor conv_layout(const Tensor& t) {
  const std::optional<DType>& low = state().dtype;
  if (!low || !t.defined() || t.dim() != 4 || t.dtype() != *low || !t.device().is_cuda() ||
      !channels_last_convolutions())
    return t;
  return to_channels_last(t);
}

}  // namespace loom::amp
