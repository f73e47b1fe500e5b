// Device parsing and printing.
#include "core/device.h"

#include <cctype>
#include <charconv>

#include "core/error.h"

namespace loom {

namespace {
// The largest "cuda:N" that parses: far above any machine's GPU count (whether device N exists is
// checked where it is used), and small enough that no int arithmetic on it overflows.
constexpr int kMaxDeviceIndex = 1023;
}  // namespace

Device::Device(const std::string& spec) {
  if (spec == "cpu") return;
  if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    if (spec.size() == 4) return;
    bool ok = spec.size() > 5 && spec[4] == ':';
    for (size_t i = 5; ok && i < spec.size(); ++i)
      ok = std::isdigit(static_cast<unsigned char>(spec[i]));
    LOOM_CHECK(ok, "Device: cannot parse '", spec,
               "' (expected cpu, cuda or cuda:N, N a GPU index >= 0)");
    // from_chars, not std::stoi: an index too large for an int is an Error, not std::out_of_range.
    int n = -1;
    auto [end, ec] = std::from_chars(spec.data() + 5, spec.data() + spec.size(), n);
    LOOM_CHECK(ec == std::errc() && end == spec.data() + spec.size() && n <= kMaxDeviceIndex,
               "Device: GPU index in '", spec,
               "' is out of range (expected cuda:N with 0 <= N <= ", kMaxDeviceIndex, ")");
    index = n;
    return;
  }
  LOOM_FAIL("Device: cannot parse '", spec, "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace loom
