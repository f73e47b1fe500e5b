// Dataset: the index -> example interface the DataLoader reads, TensorDataset (whole tensors
// whose first dim indexes examples), and collate (stack examples into one batch).
// Leaves out: iteration order (data/sampler.h), threads and devices (data/dataloader.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace loom::data {

// One example (or, stacked, one batch). `target` may be undefined for unlabelled data.
struct Example {
  Tensor data;
  Tensor target;
};

// The layout of one example, for datasets that can copy whole batches of rows at once.
struct ExampleSpec {
  Shape data_shape;  // of one example, e.g. [1, 28, 28]
  DType data_dtype = kF32;
  Shape target_shape;  // [] for a class label
  DType target_dtype = kI64;
  bool has_target = true;
};

// Note [Dataset fast path]
// get(i) is the whole contract: the loader calls it once per example (through get_for_epoch, which
// a dataset whose examples change per epoch overrides instead) and stacks the results (collate).
// Datasets that hold their examples as rows of big tensors also answer spec() and gather(): the
// loader then allocates the batch once (pinned when it will go to a GPU) and the dataset fills it
// with one memcpy per row, with no Tensor created per example. Both paths give identical batches;
// tests compare them.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // CPU tensors; data of the same shape and dtype for every index (the loader checks).
  virtual Example get(int64_t index) const = 0;
  // The example as epoch `epoch` sees it, for datasets that draw it anew each epoch from (seed,
  // epoch, index) (data/mlm.h: the masked positions); the loader's per-example path calls this
  // one. Default: get(index).
  virtual Example get_for_epoch(int64_t index, int64_t epoch) const {
    (void)epoch;
    return get(index);
  }

  // Fast path (optional): see Note [Dataset fast path].
  virtual std::optional<ExampleSpec> spec() const { return std::nullopt; }
  // Copies examples `indices` into rows of data (B, data_shape...) and target (B, target_shape...),
  // contiguous CPU tensors allocated by the caller from spec().
  virtual void gather(std::span<const int64_t> indices, const Tensor& data,
                      const Tensor& target) const;

  // Where the examples live. A dataset on a GPU is batched there (get_batch), without workers.
  virtual Device device() const { return kCPU; }
  // The examples `indices` stacked into one batch on device(). Default: gather() when spec()
  // is given, else get() per index and collate().
  virtual Example get_batch(std::span<const int64_t> indices) const;
};

// Examples are rows of `data` (N, ...) and `target` (N, ...): get(i) returns views of row i.
// The tensors are made contiguous once at construction, so gather is a memcpy per row. They may
// live on a GPU: get_batch then runs index_select there (no host round trip per batch).
class TensorDataset final : public Dataset {
 public:
  explicit TensorDataset(Tensor data, Tensor target = Tensor());

  int64_t size() const override { return data_.size(0); }
  Example get(int64_t index) const override;  // views (no copy) of row `index`
  std::optional<ExampleSpec> spec() const override;
  void gather(std::span<const int64_t> indices, const Tensor& data,
              const Tensor& target) const override;
  Device device() const override { return data_.device(); }
  Example get_batch(std::span<const int64_t> indices) const override;

  const Tensor& data() const { return data_; }
  const Tensor& target() const { return target_; }

 private:
  Tensor data_, target_;
};

// Stacks examples into data (B, ...) and target (B, ...), allocated here on the CPU. Every
// example must have the shape and dtype of the first; the error names the first that differs.
Example collate(std::span<const Example> examples);
// The same into buffers the caller allocated: data (B, ...) and target (B, ...), contiguous, CPU,
// of the examples' dtypes (the DataLoader passes pinned buffers here).
void collate_into(std::span<const Example> examples, const Tensor& data, const Tensor& target);

// Copies the rows of `src` (contiguous CPU tensor, first dim indexes rows) picked by `indices`
// into `dst` (contiguous CPU tensor of B rows of the same row size): one memcpy per row.
// `what` names the caller in errors (index out of range names the index and the size).
void gather_rows(const char* what, const Tensor& src, std::span<const int64_t> indices,
                 const Tensor& dst);

}  // namespace loom::data
