// HfConfig over nlohmann-json: the getters check the type and name the source, field and value.
// Leaves out: duplicate-key detection (config.json is not a security boundary the way a
// safetensors header is; the last value wins, as in Python's json).
#include "nn/hf_config.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace loom::nn {

using json = nlohmann::json;

struct HfConfig::Impl {
  json value;
  std::string source;
};

HfConfig HfConfig::parse(const std::string& text, const std::string& source) {
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  try {
    impl->value = json::parse(text);
  } catch (const json::exception& e) {
    LOOM_FAIL("Hugging Face config '", source, "': not valid JSON: ", e.what());
  }
  LOOM_CHECK(impl->value.is_object(), "Hugging Face config '", source,
             "': should be a JSON object, got ", impl->value.type_name());
  HfConfig c;
  c.impl_ = std::move(impl);
  return c;
}

HfConfig HfConfig::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in, "Hugging Face config '", path, "': cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

const std::string& HfConfig::source() const { return impl_->source; }

bool HfConfig::has(const std::string& key) const {
  auto it = impl_->value.find(key);
  return it != impl_->value.end() && !it->is_null();
}

std::string HfConfig::text(const std::string& key) const {
  auto it = impl_->value.find(key);
  return it == impl_->value.end() ? "null" : it->dump();
}

std::vector<std::string> HfConfig::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : impl_->value.items()) out.push_back(k);
  return out;
}

std::string HfConfig::where(const std::string& key) const {
  return "Hugging Face config '" + source() + "': field \"" + key + "\" is " + text(key);
}

void HfConfig::check_model_type(const std::string& type, const std::string& reader) const {
  if (has("model_type"))
    LOOM_CHECK(string("model_type") == type, where("model_type"), "; ", reader, " (\"", type,
               "\")");
}

double HfConfig::same_number(const std::vector<std::string>& keys, double fallback,
                             const std::string& why) const {
  std::string listed;
  bool same = true;
  const double first = number(keys.at(0), fallback);
  for (size_t i = 0; i < keys.size(); ++i) {
    const double v = number(keys[i], fallback);
    same = same && v == first;
    listed += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + keys[i] + " " + str(v);
  }
  LOOM_CHECK(same, "Hugging Face config '", source(), "': ", listed, " differ; ", why);
  return first;
}

namespace {

// The field's value if it is of the type `ok` accepts; an error naming what was expected.
template <typename T, typename Ok>
T get(const json& obj, const std::string& source, const std::string& key, const char* expected,
      Ok ok) {
  auto it = obj.find(key);
  LOOM_CHECK(it != obj.end() && !it->is_null(), "Hugging Face config '", source, "': field \"", key,
             "\" is missing (", expected, " expected)");
  LOOM_CHECK(ok(*it), "Hugging Face config '", source, "': field \"", key, "\" is ", it->dump(),
             ", ", expected, " expected");
  return it->template get<T>();
}

}  // namespace

int64_t HfConfig::integer(const std::string& key) const {
  return get<int64_t>(impl_->value, source(), key, "an integer",
                      [](const json& v) { return v.is_number_integer(); });
}
int64_t HfConfig::integer(const std::string& key, int64_t fallback) const {
  return has(key) ? integer(key) : fallback;
}

double HfConfig::number(const std::string& key) const {
  return get<double>(impl_->value, source(), key, "a number",
                     [](const json& v) { return v.is_number(); });
}
double HfConfig::number(const std::string& key, double fallback) const {
  return has(key) ? number(key) : fallback;
}

bool HfConfig::boolean(const std::string& key) const {
  return get<bool>(impl_->value, source(), key, "true or false",
                   [](const json& v) { return v.is_boolean(); });
}
bool HfConfig::boolean(const std::string& key, bool fallback) const {
  return has(key) ? boolean(key) : fallback;
}

std::string HfConfig::string(const std::string& key) const {
  return get<std::string>(impl_->value, source(), key, "a string",
                          [](const json& v) { return v.is_string(); });
}
std::string HfConfig::string(const std::string& key, const std::string& fallback) const {
  return has(key) ? string(key) : fallback;
}

std::vector<int64_t> HfConfig::integers(const std::string& key) const {
  auto is_list = [](const json& v) {
    return v.is_number_integer() ||
           (v.is_array() &&
            std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number_integer(); }));
  };
  const json v =
      get<json>(impl_->value, source(), key, "an integer or a list of integers", is_list);
  return v.is_array() ? v.get<std::vector<int64_t>>() : std::vector<int64_t>{v.get<int64_t>()};
}

HfConfig HfConfig::object(const std::string& key) const {
  get<json>(impl_->value, source(), key, "an object", [](const json& v) { return v.is_object(); });
  auto impl = std::make_shared<Impl>();
  impl->value = impl_->value.at(key);
  impl->source = source() + ": " + key;
  HfConfig c;
  c.impl_ = std::move(impl);
  return c;
}

namespace {
struct TorchDType {
  DType dtype;
  const char* name;
};
constexpr TorchDType kTorchDTypes[] = {{DType::F32, "float32"},
                                       {DType::F16, "float16"},
                                       {DType::BF16, "bfloat16"},
                                       {DType::F64, "float64"}};
}  // namespace

std::optional<DType> HfConfig::dtype() const {
  const char* key = has("dtype") ? "dtype" : has("torch_dtype") ? "torch_dtype" : nullptr;
  if (!key) return std::nullopt;
  std::string s = string(key);
  for (const auto& d : kTorchDTypes)
    if (s == d.name) return d.dtype;
  LOOM_FAIL("Hugging Face config '", source(), "': field \"", key, "\" is \"", s,
            "\"; loom reads float32, float16, bfloat16 and float64 checkpoints");
}

const char* torch_dtype_name(DType t) {
  for (const auto& d : kTorchDTypes)
    if (d.dtype == t) return d.name;
  LOOM_FAIL("torch_dtype_name: ", dtype_name(t), " is not a floating-point dtype of checkpoints");
}

}  // namespace loom::nn
