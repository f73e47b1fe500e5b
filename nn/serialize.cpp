// save_safetensors / load_safetensors: device and layout copies around core/safetensors.
#include "nn/serialize.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"

namespace loom {

Tensor to_host_contiguous(const Tensor& t) {
  autograd::NoGradGuard no_grad;
  return t.detach().to(kCPU).contiguous();
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const StringMap& metadata) {
  NamedTensors host;
  host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    LOOM_CHECK(t.defined(), "save_safetensors '", path, "': tensor '", name, "' is undefined");
    host.emplace_back(name, to_host_contiguous(t));
  }
  write_safetensors(path, host, metadata);
}

SafetensorsFile load_safetensors(const std::string& path, Device device) {
  SafetensorsFile f = read_safetensors(path);
  if (!device.is_cpu()) {
    autograd::NoGradGuard no_grad;
    for (auto& [name, t] : f.tensors) t = t.to(device);
  }
  return f;
}

}  // namespace loom
