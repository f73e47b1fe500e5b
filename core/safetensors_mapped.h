// A safetensors file mapped into memory (mmap): its checked header, and each tensor as a CPU
// tensor over the mapped bytes, so a model's weights go from the file to their place one tensor
// at a time without the file ever being read into a buffer (Note [Mapped safetensors]).
// Leaves out: writing (core/safetensors.h), folders of shards (core/safetensors_shards.h).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/safetensors.h"

namespace loom {

// Note [Mapped safetensors]
// The file is mapped whole, privately (MAP_PRIVATE | MAP_NORESERVE): its pages come from the page
// cache when a tensor's bytes are first read and count against no allocator. The mapping is
// writable copy-on-write, so a write to a mapped tensor changes a private copy of that page, never
// the file, and never faults. A tensor handed out keeps the mapping alive (its storage holds it)
// after the MappedSafetensors is gone. release() returns a tensor's pages once it has been copied
// where it belongs, so mapping an 8B model's shards costs no more resident memory than the tensor
// being copied. Every header check of core/safetensors.h runs when the file is opened (a file
// shorter than its header says is refused then); a file truncated by another process while it is
// mapped is beyond what a reader can check (reading those pages raises SIGBUS, as for any mmap).
class MappedSafetensors {
 public:
  // Opens and maps `path` and checks its header; errors name the file.
  explicit MappedSafetensors(const std::string& path);

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  // The entry of `name`, or nullptr.
  const SafetensorsEntry* find(const std::string& name) const;

  // The tensor of entry `e` (one of header().entries): a contiguous CPU tensor of e.dtype and
  // e.shape over the mapped bytes (Note [Mapped safetensors]). Bytes that are not aligned to their
  // element size (a writer that does not pad) are copied into an aligned tensor instead.
  Tensor tensor(const SafetensorsEntry& e) const;
  // Gives e's whole pages back to the kernel (madvise DONTNEED): the next read of them comes from
  // the page cache or the file again. Tensors over them stay valid.
  void release(const SafetensorsEntry& e) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> map_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> by_name_;  // name -> index into header_.entries
};

}  // namespace loom
