// Device parsing and printing.
#include "core/device.h"

#include <cctype>

#include "core/error.h"

namespace loom {

Device::Device(const std::string& spec) {
  if (spec == "cpu") return;
  if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    if (spec.size() == 4) return;
    bool ok = spec.size() > 5 && spec[4] == ':';
    for (size_t i = 5; ok && i < spec.size(); ++i) ok = std::isdigit(static_cast<unsigned char>(spec[i]));
    LOOM_CHECK(ok, "Device: cannot parse '", spec, "' (expected cpu, cuda or cuda:N)");
    index = std::stoi(spec.substr(5));
    return;
  }
  LOOM_FAIL("Device: cannot parse '", spec, "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace loom
