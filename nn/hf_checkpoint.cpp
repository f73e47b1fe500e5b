// HfCheckpoint (a folder's config and mapped weights, tensors copied out one at a time) and the
// generic load/save of a Module through an HfTensorMap.
// Leaves out: any one model's names (nn/hf_gpt2.cpp).
#include "nn/hf_checkpoint.h"

#include <filesystem>
#include <map>
#include <set>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "core/atomic_file.h"

namespace loom::nn {

namespace fs = std::filesystem;

namespace {
std::string folder(const std::string& dir) { return "Hugging Face folder '" + dir + "': "; }
}  // namespace

HfCheckpoint::HfCheckpoint(const std::string& dir)
    : weights_(dir), config_(HfConfig::read((fs::path(dir) / "config.json").string())) {}

SafetensorsFolder::Ref HfCheckpoint::at(const std::string& name) const {
  SafetensorsFolder::Ref r = weights_.find(name);
  LOOM_CHECK(r.file, folder(dir()), "has no tensor '", name, "' (it holds ",
             weights_.names().size(), " tensors)");
  return r;
}

Tensor HfCheckpoint::tensor(const std::string& name, Device device,
                            std::optional<DType> dtype) const {
  const SafetensorsEntry& e = *at(name).entry;
  Tensor out = empty(e.shape, {.dtype = dtype.value_or(e.dtype), .device = device});
  copy_into(name, out);
  return out;
}

// The mapped tensor goes through one copy_: on the CPU a strided, converting loop straight from
// the mapped pages; to a GPU an upload of the mapped bytes (or of a contiguous host copy of the
// one tensor when transposed) and a conversion there (kernels/cuda/elementwise/cuda_copy.cu).
void HfCheckpoint::copy_into(const std::string& name, const Tensor& dst, bool transposed) const {
  SafetensorsFolder::Ref r = at(name);
  const SafetensorsEntry& e = *r.entry;
  LOOM_CHECK(dst.defined(), folder(dir()), "copy_into: the destination of '", name,
             "' is undefined");
  LOOM_CHECK(!transposed || dst.dim() == 2, folder(dir()), "copy_into: tensor '", name,
             "' is stored transposed, so its destination must be 2-d, got ", describe(dst));
  Shape want = dst.shape();
  if (transposed) std::swap(want[0], want[1]);
  LOOM_CHECK(e.shape == want, "Hugging Face file '", r.file->path(), "': tensor '", name, "' is ",
             e.shape, " but the model's is ", want,
             transposed ? " (stored transposed: the model's tensor is " : "",
             transposed ? describe(dst) + ")" : "");
  LOOM_CHECK(is_floating(e.dtype) == dst.is_floating_point(), "Hugging Face file '", r.file->path(),
             "': tensor '", name, "' is ", dtype_name(e.dtype), " and its destination ",
             describe(dst),
             "; loom does not convert between integer and floating-point tensors here");
  autograd::NoGradGuard no_grad;
  Tensor src = r.file->tensor(e);
  if (transposed) src = transpose(src, 0, 1);
  Tensor target = dst;  // a handle: copy_ writes dst's storage
  target.copy_(src);
  r.file->release(e);
}

// ---------------------------------------------------------------- loading

namespace {

// The checks of one mapped tensor beyond copy_into's: present, floating-point, and of
// config.json's dtype.
void check_entry(const HfCheckpoint& ckpt, const HfTensor& m) {
  LOOM_CHECK(ckpt.contains(m.hf_name), folder(ckpt.dir()), "tensor '", m.hf_name, "' (loom's '",
             m.loom_name, "') is missing from the checkpoint");
  std::optional<DType> want = ckpt.config().dtype();
  SafetensorsFolder::Ref r = ckpt.at(m.hf_name);
  LOOM_CHECK(is_floating(r.entry->dtype), "Hugging Face file '", r.file->path(), "': tensor '",
             m.hf_name, "' is ", dtype_name(r.entry->dtype), " ", r.entry->shape,
             "; loom loads floating-point weights");
  LOOM_CHECK(!want || r.entry->dtype == *want, "Hugging Face file '", r.file->path(), "': tensor '",
             m.hf_name, "' is ", dtype_name(r.entry->dtype), " ", r.entry->shape, " but ",
             ckpt.config().source(), " says the checkpoint is ", torch_dtype_name(*want));
}

// Every state_dict entry is mapped once, or as parts that tile its rows, and every map entry
// names a state_dict entry.
std::map<std::string, Tensor> mapped_state(const Module& model, const HfTensorMap& map,
                                           const std::string& dir) {
  std::map<std::string, Tensor> sd;
  for (auto& [name, t] : model.state_dict()) sd[name] = t;
  std::map<std::string, std::map<int64_t, int64_t>> parts;  // loom name -> row start -> rows
  for (const auto& m : map) {
    LOOM_CHECK(sd.count(m.loom_name), folder(dir), "the mapping names loom tensor '", m.loom_name,
               "' (for '", m.hf_name, "'), which the model does not have");
    const Tensor& t = sd.at(m.loom_name);
    const int64_t rows = m.rows >= 0 ? m.rows : t.dim() > 0 ? t.size(0) : 0;
    LOOM_CHECK(m.rows < 0 || !m.transposed, folder(dir), "the mapping stores part of loom tensor '",
               m.loom_name, "' transposed ('", m.hf_name, "'), which is not supported");
    LOOM_CHECK(parts[m.loom_name].emplace(m.row_start, rows).second, folder(dir),
               "the mapping names rows from ", m.row_start, " of loom tensor '", m.loom_name,
               "' twice");
  }
  for (const auto& [name, t] : sd) {
    LOOM_CHECK(parts.count(name), folder(dir), "the model's tensor '", name,
               "' is not in the mapping, so it would keep its initial values");
    int64_t next = 0;  // the parts, in row order, must follow each other from 0 to size(0)
    for (const auto& [start, rows] : parts.at(name)) next = start == next ? start + rows : -1;
    LOOM_CHECK(next == (t.dim() > 0 ? t.size(0) : 0), folder(dir),
               "the mapping's parts of loom tensor '", name, "' ", describe(t),
               " do not cover its rows once each");
  }
  return sd;
}

// The part of the loom tensor an entry maps: all of it, or its rows.
Tensor mapped_part(const std::map<std::string, Tensor>& sd, const HfTensor& m) {
  autograd::NoGradGuard no_grad;
  const Tensor& t = sd.at(m.loom_name);
  return m.rows < 0 ? t : slice(t.detach(), 0, m.row_start, m.row_start + m.rows);
}

}  // namespace

void load_hf_tensors(Module& model, const HfCheckpoint& ckpt, const HfTensorMap& map,
                     const std::function<bool(const std::string&)>& ignore) {
  std::map<std::string, Tensor> sd = mapped_state(model, map, ckpt.dir());
  std::set<std::string> mapped;
  for (const auto& m : map) {
    check_entry(ckpt, m);
    mapped.insert(m.hf_name);
  }
  for (const auto& name : ckpt.names())
    LOOM_CHECK(mapped.count(name) || (ignore && ignore(name)), "Hugging Face file '",
               ckpt.at(name).file->path(), "': tensor '", name, "' ",
               dtype_name(ckpt.at(name).entry->dtype), " ", ckpt.at(name).entry->shape,
               " is not one the model has (an extra tensor: another architecture or config?)");
  for (const auto& m : map) ckpt.copy_into(m.hf_name, mapped_part(sd, m), m.transposed);
}

// ---------------------------------------------------------------- saving

void save_hf_tensors(const Module& model, const HfTensorMap& map, const std::string& config_json,
                     const std::string& dir, const HfSaveOptions& options) {
  std::map<std::string, Tensor> sd = mapped_state(model, map, dir);
  std::vector<TensorSpec> specs;
  for (const auto& m : map) {
    const Tensor t = mapped_part(sd, m);
    Shape shape = t.shape();
    if (m.transposed) {
      LOOM_CHECK(t.dim() == 2, folder(dir), "tensor '", m.loom_name, "' is ", describe(t),
                 "; only 2-d tensors can be stored transposed");
      std::swap(shape[0], shape[1]);
    }
    specs.push_back({m.hf_name, options.dtype.value_or(t.dtype()), shape});
  }
  // One tensor at a time: transposed and converted where it lives, then one host copy.
  auto host = [&](size_t i) {
    autograd::NoGradGuard no_grad;
    Tensor t = mapped_part(sd, map[i]).detach();
    if (map[i].transposed) t = transpose(t, 0, 1);
    if (t.dtype() != specs[i].dtype) t = to(t, specs[i].dtype);
    return contiguous(to(contiguous(t), kCPU));
  };
  fs::create_directories(dir);
  write_safetensors_folder(dir, specs, host, options.max_shard_bytes, {{"format", "pt"}});
  AtomicFileWriter config((fs::path(dir) / "config.json").string());
  config.write(config_json.data(), config_json.size());
  config.commit();
}

}  // namespace loom::nn
