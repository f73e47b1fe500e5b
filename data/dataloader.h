// DataLoader: cuts a sampler's order into batches, collates them on worker threads (into pinned
// host buffers when they go to a GPU), prefetches a bounded number ahead, delivers them in order
// and copies them to the device asynchronously. Resumable mid-epoch through state()/load_state().
// Leaves out: worker processes (threads suffice: collation is memcpy, no interpreter lock here)
// and a separate copy stream (the copy is queued on the compute stream; see Note [Device copy]).
#pragma once

#include <concepts>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"
#include "data/transforms.h"

namespace loom::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;         // RandomSampler(seed) instead of SequentialSampler
  bool drop_last = false;       // drop the last batch when it is smaller than batch_size
  int64_t num_workers = 0;      // 0: collate on the calling thread
  int64_t prefetch_factor = 2;  // batches in flight = prefetch_factor * num_workers
  bool pin_memory = true;       // collate into page-locked memory when `device` is a GPU
  Device device = kCPU;         // where the delivered batches live
  uint64_t seed = 0;            // the shuffle (seed + epoch) and the transforms' per-sample streams
  std::shared_ptr<const Transform> transform =
      nullptr;  // per example, on the workers (float32 data)
};

// One batch. data (B, ...) and target (B, ...) are on the loader's device.
struct Batch {
  Tensor data;
  Tensor target;                 // undefined for datasets without targets
  std::vector<int64_t> indices;  // the dataset indices of the rows, in order
  int64_t epoch = 0;
  int64_t index = 0;  // batch number within the epoch (counting from the epoch's start)
};

// Note [Loader epochs]
// The loader is a cursor over epochs. next() returns the next batch of the current epoch and,
// once the epoch is exhausted, returns nothing a single time and moves to the next epoch (so a
// fresh `for (Batch& b : loader)` reshuffles). set_epoch(e) jumps to epoch e (a no-op for the
// current epoch, so a resumed run keeps its position). A loop left early (break) leaves the
// position where the consumer stopped: the next iteration continues that epoch. state() names
// the next sample to deliver; a checkpoint saves it and load_state() resumes exactly there.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  // With a sampler of one's own (e.g. DistributedSampler); options.shuffle must then be false.
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
             DataLoaderOptions options = {});
  // Takes a dataset by value (TensorDataset, FashionMNIST...: handles to shared tensors).
  template <typename D>
  requires std::derived_from<D, Dataset> DataLoader(D dataset, DataLoaderOptions options = {})
      : DataLoader(std::make_shared<D>(std::move(dataset)), std::move(options)) {}
  ~DataLoader();  // stops and joins the workers, whatever state the iteration is in
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch, or nothing at the end of the epoch (then the loader moves to the next one).
  // A worker's exception is rethrown here, unchanged, when its batch is due.
  std::optional<Batch> next();

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    explicit Iterator(DataLoader* loader) : loader_(loader), current_(loader->next()) {}
    Batch& operator*() { return *current_; }
    Batch* operator->() { return &*current_; }
    Iterator& operator++() {
      current_ = loader_->next();
      return *this;
    }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    DataLoader* loader_;
    std::optional<Batch> current_;
  };
  Iterator begin() { return Iterator(this); }
  std::default_sentinel_t end() const { return {}; }

  int64_t size() const;          // batches in a whole epoch
  int64_t batches_left() const;  // batches not yet delivered in the current epoch
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return sampler_->epoch(); }
  SamplerState state() const { return sampler_->state(); }
  void load_state(const SamplerState& s);

  const Dataset& dataset() const { return *dataset_; }
  const Sampler& sampler() const { return *sampler_; }
  const DataLoaderOptions& options() const { return opt_; }

 private:
  struct Run;
  void check_options() const;
  void start_run();
  void stop_run();
  Batch deliver(int64_t k, Example src);

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<Sampler> sampler_;
  DataLoaderOptions opt_;
  bool pinned_ = false;       // collate into pinned host memory (batches go to a GPU)
  std::unique_ptr<Run> run_;  // the pass over the rest of the current epoch
};

}  // namespace loom::data
