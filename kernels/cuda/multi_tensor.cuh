// Multi-tensor launches, written once for the fused optimizer steps (cuda_optim.cu), the
// GradScaler's unscale (cuda_amp.cu) and the gradient norm (cuda_grad_norm.cu): a table of
// tensors cut into fixed-size chunks that travels in the kernel arguments, the device-side lookup
// from a block's chunk to its tensor and element range, and the host loop that fills tables and
// launches one kernel per table.
// Leaves out: the per-element math and the kernels themselves (each caller has its own).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/dispatch.h"
#include "core/tensor.h"
#include "kernels/cuda/launch.h"

namespace loom::cuda {

// Note [Multi-tensor table in kernel arguments]
// Each tensor is cut into chunks of kChunk elements; chunk_start[t] is the global number of
// tensor t's first chunk. Block b takes chunks b, b + gridDim.x, ...; for each it finds the tensor
// by a binary search over chunk_start (the same for all threads of the block) and updates that
// chunk's elements with a block-stride loop. The table (pointers, sizes, chunk starts) travels in
// the kernel arguments, which CUDA 12.1+ allows up to 32764 bytes on Volta and later: no host-to-
// device copy and nothing to keep alive, and a CUDA graph captures the launch as it is.

// Up to MaxTensors tensors, each with Lists pointers (list l of tensor t: ptr[l][t], e.g. a
// parameter, its gradient and its states), cut into chunks of Chunk elements.
template <typename T, int Lists, int MaxTensors, int64_t Chunk>
struct TensorTable {
  using Elem = T;
  static constexpr int kLists = Lists;
  static constexpr int kMaxTensors = MaxTensors;
  static constexpr int64_t kChunk = Chunk;
  int n = 0;
  T* ptr[Lists][MaxTensors];
  int64_t numel[MaxTensors];
  int64_t chunk_start[MaxTensors + 1];
};

// One list of tensors (gradients: the GradScaler's unscale, the gradient norm and its clip): up
// to 512 tensors, in chunks of 8192 elements.
template <typename T>
using GradTable = TensorTable<T, 1, 512, 8192>;
static_assert(sizeof(GradTable<double>) < 30000, "the table must fit in the kernel arguments");

// Chunk c of a table: tensor t, elements [begin, end) of it.
struct ChunkRange {
  int t;
  int64_t begin, end;
};

// The chunk's tensor is the largest t with chunk_start[t] <= c (tables hold no empty tensors).
template <typename Table>
__device__ ChunkRange chunk_range(const Table& tab, int64_t c) {
  int lo = 0, hi = tab.n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (tab.chunk_start[mid] <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t begin = (c - tab.chunk_start[lo]) * Table::kChunk;
  return {lo, begin, min(begin + Table::kChunk, tab.numel[lo])};
}

// Fills tables from `lists` (Table::kLists of them, entry i of each belonging to tensor i of
// lists[0]; an empty list gives null pointers) and calls launch(table, total_chunks) for each full
// table and the last. Tensors of lists[0] that are empty or not of the table's element type are
// left out.
template <typename Table, typename Launch>
void for_each_table(const std::vector<const std::vector<Tensor>*>& lists, const Launch& launch) {
  using T = typename Table::Elem;
  const std::vector<Tensor>& first = *lists[0];
  Table tab;
  auto flush = [&] {
    if (tab.n > 0) launch(tab, tab.chunk_start[tab.n]);
    tab.n = 0;
  };
  for (size_t i = 0; i < first.size(); ++i) {
    const int64_t n = first[i].numel();
    if (n == 0 || first[i].dtype() != DTypeOf<T>::value) continue;
    if (tab.n == Table::kMaxTensors) flush();
    const int k = tab.n;
    for (int l = 0; l < Table::kLists; ++l) {
      const auto* list = lists[size_t(l)];
      tab.ptr[l][k] = list->empty() ? nullptr : static_cast<T*>((*list)[i].data_ptr());
    }
    tab.numel[k] = n;
    if (k == 0) tab.chunk_start[0] = 0;
    tab.chunk_start[k + 1] = tab.chunk_start[k] + (n + Table::kChunk - 1) / Table::kChunk;
    tab.n = k + 1;
  }
  flush();
}

// Blocks for a launch over `chunks` chunks: one per chunk, at most 8 per multiprocessor.
inline int64_t grid_for_chunks(int64_t chunks, int device) {
  return std::max<int64_t>(1, std::min<int64_t>(chunks, int64_t(multiprocessor_count(device)) * 8));
}

}  // namespace loom::cuda
