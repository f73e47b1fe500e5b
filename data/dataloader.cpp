// DataLoader: batching, worker threads with a bounded prefetch window, in-order delivery,
// exception propagation, pinned buffers and the copy to the device.
#include "data/dataloader.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "autograd/grad_mode.h"
#include "autograd/ops/shape.h"
#include "kernels/backend.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/host_allocator.h"
#include "core/cuda/stream.h"
#endif

namespace loom::data {

namespace {

struct Produced {
  Example src;  // the collated batch: on the host (pinned when going to a GPU), or on the dataset's
                // device
  std::exception_ptr error;
};

Shape with_batch(int64_t b, const Shape& s) {
  Shape out{b};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// A host buffer for a batch: page-locked when it will be copied to a GPU (Note [Device copy]).
Tensor host_buffer(const Shape& shape, DType dtype, bool pinned) {
#ifdef LOOM_WITH_CUDA
  if (pinned) return loom::cuda::pinned_empty(shape, dtype);
#else
  (void)pinned;
#endif
  return empty(shape, {.dtype = dtype});
}

void check_transform_input(const Transform& t, const Tensor& x, int64_t index) {
  LOOM_CHECK(x.dtype() == kF32 && x.device().is_cpu(), "DataLoader: transform ", t.name(),
             " needs float32 CPU data, but example ", index, " is ", describe(x));
}

// Collates the examples `idx` of epoch `epoch`, applying the transform per example with the
// sample's own stream. Runs on a worker thread (or the consumer when num_workers is 0).
// Never throws: an error travels in Produced::error to the consumer, in batch order.
Produced produce_batch(const Dataset& ds, const DataLoaderOptions& opt, bool pinned,
                       std::span<const int64_t> idx, int64_t epoch) {
  Produced p;
  try {
    const int64_t b = int64_t(idx.size());
    const Transform* tf = opt.transform.get();
    if (!ds.device().is_cpu()) {
      p.src = ds.get_batch(idx);  // a dataset on a GPU batches itself there (no transforms)
    } else if (std::optional<ExampleSpec> sp = ds.spec()) {
      // Fast path, Note [Dataset fast path]: one buffer per batch, one memcpy per row.
      if (tf)
        LOOM_CHECK(sp->data_dtype == kF32, "DataLoader: transform ", tf->name(),
                   " needs float32 data, but the dataset's examples are ",
                   dtype_name(sp->data_dtype), " ", sp->data_shape);
      const Shape out_shape = tf ? tf->output_shape(sp->data_shape) : sp->data_shape;
      p.src.data = host_buffer(with_batch(b, out_shape), sp->data_dtype, pinned);
      if (sp->has_target)
        p.src.target = host_buffer(with_batch(b, sp->target_shape), sp->target_dtype, pinned);
      if (!tf) {
        ds.gather(idx, p.src.data, p.src.target);
      } else {
        Tensor raw = empty(with_batch(b, sp->data_shape), {.dtype = kF32});
        ds.gather(idx, raw, p.src.target);
        const int64_t in_n = numel(sp->data_shape), out_n = numel(out_shape);
        const float* in = raw.data<float>();
        float* out = p.src.data.data<float>();
        for (int64_t i = 0; i < b; ++i) {
          SampleRng rng(opt.seed, epoch, idx[size_t(i)]);
          tf->apply(in + i * in_n, sp->data_shape, out + i * out_n, rng);
        }
      }
    } else {
      // Generic path: get() per example, transform, stack.
      std::vector<Example> examples;
      examples.reserve(idx.size());
      for (int64_t i : idx) {
        Example e = ds.get_for_epoch(i, epoch);
        if (tf) {
          check_transform_input(*tf, e.data, i);
          SampleRng rng(opt.seed, epoch, i);
          e.data = (*tf)(e.data, rng);
        }
        examples.push_back(std::move(e));
      }
      if (!pinned) {
        p.src = collate(examples);
      } else {
        const Example& e0 = examples.at(0);
        p.src.data = host_buffer(with_batch(b, e0.data.shape()), e0.data.dtype(), true);
        if (e0.target.defined())
          p.src.target = host_buffer(with_batch(b, e0.target.shape()), e0.target.dtype(), true);
        collate_into(examples, p.src.data, p.src.target);
      }
    }
  } catch (...) {
    p.src = {};
    p.error = std::current_exception();
  }
  return p;
}

}  // namespace

// Note [Prefetch window]
// Batches of a run are numbered 0..num_batches-1. A worker takes the lowest number nobody has
// taken (next_make), but only while next_make < next_deliver + window: at most `window` batches
// are being collated or waiting, so memory is bounded and workers never run away from a slow
// consumer. Finished batches wait in `ready` keyed by number; the consumer takes exactly
// next_deliver, so delivery is in order whichever worker finishes first, and the contents of
// batch k depend only on (order, k, seed, epoch): identical for any num_workers.
struct DataLoader::Run {
  int64_t epoch = 0;
  int64_t start = 0;           // the sampler position this run started from
  std::vector<int64_t> order;  // the epoch's indices from `start` on
  int64_t batch_size = 1, num_batches = 0, window = 1;

  std::mutex mu;
  std::condition_variable work_cv, ready_cv;
  int64_t next_make = 0, next_deliver = 0;
  bool stop = false;
  std::map<int64_t, Produced> ready;
  std::vector<std::thread> workers;

  std::span<const int64_t> batch_indices(int64_t k) const {
    const size_t b = size_t(k * batch_size),
                 e = std::min(order.size(), size_t((k + 1) * batch_size));
    return std::span<const int64_t>(order).subspan(b, e - b);
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : DataLoader(dataset, nullptr, std::move(options)) {}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
                       DataLoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), opt_(std::move(options)) {
  LOOM_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
  LOOM_CHECK(!(sampler_ && opt_.shuffle),
             "DataLoader: shuffle = true with a sampler of your own; the sampler ",
             "decides the order (DistributedSampler has its own shuffle option)");
  if (!sampler_) {
    if (opt_.shuffle)
      sampler_ = std::make_shared<RandomSampler>(dataset_->size(), opt_.seed);
    else
      sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
  check_options();
#ifdef LOOM_WITH_CUDA
  pinned_ = opt_.device.is_cuda() && opt_.pin_memory && dataset_->device().is_cpu() &&
            loom::cuda::is_available();
#endif
}

DataLoader::~DataLoader() { stop_run(); }

void DataLoader::check_options() const {
  LOOM_CHECK(opt_.batch_size >= 1, "DataLoader: batch_size ", opt_.batch_size,
             " must be at least 1");
  LOOM_CHECK(opt_.num_workers >= 0, "DataLoader: num_workers ", opt_.num_workers, " is negative");
  LOOM_CHECK(opt_.prefetch_factor >= 1, "DataLoader: prefetch_factor ", opt_.prefetch_factor,
             " must be at least 1");
  LOOM_CHECK(opt_.device.is_cpu() || has_backend(opt_.device.type), "DataLoader: device ",
             opt_.device,
             " requested, but this build of loom has no CUDA (configure with -DLOOM_CUDA=ON)");
  LOOM_CHECK(dataset_->device().is_cpu() || !opt_.transform, "DataLoader: the dataset lives on ",
             dataset_->device(),
             " and transforms run on the host; move the dataset to the CPU or drop the transform ",
             opt_.transform ? opt_.transform->name() : "");
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size(), bs = opt_.batch_size;
  return opt_.drop_last ? n / bs : (n + bs - 1) / bs;
}

int64_t DataLoader::batches_left() const {
  if (run_) return run_->num_batches - run_->next_deliver;
  const int64_t n = sampler_->size() - sampler_->position(), bs = opt_.batch_size;
  return opt_.drop_last ? n / bs : (n + bs - 1) / bs;
}

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch == sampler_->epoch()) return;  // Note [Loader epochs]
  stop_run();
  sampler_->set_epoch(epoch);
}

void DataLoader::load_state(const SamplerState& s) {
  stop_run();
  sampler_->load_state(s);
}

void DataLoader::start_run() {
  auto r = std::make_unique<Run>();
  r->epoch = sampler_->epoch();
  r->start = sampler_->position();
  std::vector<int64_t> all = sampler_->indices(r->epoch);
  LOOM_CHECK(int64_t(all.size()) == sampler_->size(), "DataLoader: the sampler gave ", all.size(),
             " indices for an epoch but says its size is ", sampler_->size());
  r->order.assign(all.begin() + r->start, all.end());
  r->batch_size = opt_.batch_size;
  const int64_t n = int64_t(r->order.size());
  r->num_batches = opt_.drop_last ? n / r->batch_size : (n + r->batch_size - 1) / r->batch_size;
  const bool threads = opt_.num_workers > 0 && dataset_->device().is_cpu();
  r->window = threads ? opt_.prefetch_factor * opt_.num_workers : 1;
  run_ = std::move(r);
  if (!threads) return;
  Run* run = run_.get();
  const Dataset* ds = dataset_.get();
  const bool pinned = pinned_;
  const DataLoaderOptions* opt = &opt_;
  try {
    for (int64_t w = 0; w < opt_.num_workers; ++w) {
      run_->workers.emplace_back([run, ds, pinned, opt] {
        for (;;) {
          int64_t k;
          {
            std::unique_lock<std::mutex> lk(run->mu);
            run->work_cv.wait(lk, [run] {
              return run->stop || run->next_make >= run->num_batches ||
                     run->next_make < run->next_deliver + run->window;  // Note [Prefetch window]
            });
            if (run->stop || run->next_make >= run->num_batches) return;
            k = run->next_make++;
          }
          Produced p = produce_batch(*ds, *opt, pinned, run->batch_indices(k), run->epoch);
          {
            std::lock_guard<std::mutex> lk(run->mu);
            run->ready.emplace(k, std::move(p));
          }
          run->ready_cv.notify_all();
        }
      });
    }
  } catch (...) {
    stop_run();  // could not start every thread: join those that did start
    throw;
  }
}

void DataLoader::stop_run() {
  if (!run_) return;
  {
    std::lock_guard<std::mutex> lk(run_->mu);
    run_->stop = true;
  }
  run_->work_cv.notify_all();
  for (std::thread& t : run_->workers) t.join();  // each finishes at most its current batch
  run_.reset();
}

std::optional<Batch> DataLoader::next() {
  if (!run_) start_run();
  Run& r = *run_;
  if (r.next_deliver >= r.num_batches) {  // end of the epoch: Note [Loader epochs]
    const int64_t e = r.epoch;
    stop_run();
    sampler_->set_epoch(e + 1);
    return std::nullopt;
  }
  const int64_t k = r.next_deliver;
  Produced p;
  if (r.workers.empty()) {
    p = produce_batch(*dataset_, opt_, pinned_, r.batch_indices(k), r.epoch);
  } else {
    std::unique_lock<std::mutex> lk(r.mu);
    r.ready_cv.wait(lk, [&r, k] { return r.ready.count(k) > 0; });
    auto it = r.ready.find(k);
    p = std::move(it->second);
    r.ready.erase(it);
  }
  if (p.error) {
    // The run cannot go on past a failed batch; the position stays before it.
    stop_run();
    std::rethrow_exception(p.error);
  }
  {
    std::lock_guard<std::mutex> lk(r.mu);
    r.next_deliver = k + 1;
  }
  r.work_cv.notify_all();
  Batch b = deliver(k, std::move(p.src));
  sampler_->set_position(r.start + k * r.batch_size + int64_t(b.indices.size()));
  return b;
}

// Note [Device copy]
// Workers collate into pinned host memory (core/cuda/host_allocator.h) when the batch goes to a
// GPU. The copy is Tensor::to on the consumer thread, so it is queued on the device's current
// stream ahead of the step that reads the batch: ordering needs no event. From pinned memory it
// is asynchronous: the host goes on queuing the step while the DMA runs. The host tensor is
// dropped right after; record_pinned_use records an event on that stream so the pinned
// allocator hands the block out again only once the copy has read it. A second copy stream would
// also overlap the copy with the previous step's kernels, but needs cross-stream bookkeeping in
// the caching allocator; batches here are small (800 KB for 256 Fashion-MNIST images: tens of
// microseconds), so it is left out.
Batch DataLoader::deliver(int64_t k, Example src) {
  Run& r = *run_;
  Batch b;
  std::span<const int64_t> idx = r.batch_indices(k);
  b.indices.assign(idx.begin(), idx.end());
  b.epoch = r.epoch;
  b.index = r.start / r.batch_size + k;
  if (src.data.device() == opt_.device) {
    b.data = std::move(src.data);
    b.target = std::move(src.target);
    return b;
  }
  autograd::NoGradGuard no_grad;
  b.data = to(src.data, opt_.device);
  if (src.target.defined()) b.target = to(src.target, opt_.device);
#ifdef LOOM_WITH_CUDA
  if (pinned_ && opt_.device.is_cuda()) {
    cudaStream_t stream = loom::cuda::current_stream(opt_.device.index);
    loom::cuda::record_pinned_use(src.data.storage()->ptr(), stream);
    if (src.target.defined()) loom::cuda::record_pinned_use(src.target.storage()->ptr(), stream);
  }
#endif
  return b;
}

}  // namespace loom::data
