// MappedSafetensors: open, fstat, mmap, the header checks of core/safetensors.cpp on the mapped
// bytes, and tensors whose storage is a window of the mapping. Leaves out: madvise hints other
// than DONTNEED (the kernel's readahead serves a tensor-by-tensor copy well enough).
#include "core/safetensors_mapped.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace loom {

namespace {
std::string prefix(const std::string& path) { return "safetensors file '" + path + "': "; }
}  // namespace

// The mapped file; unmapped when the last MappedSafetensors or tensor over it goes.
struct MappedSafetensors::Mapping {
  void* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base) ::munmap(base, size);
  }
  const char* bytes() const { return static_cast<const char*>(base); }
};

MappedSafetensors::MappedSafetensors(const std::string& path)
    : path_(path), map_(std::make_shared<Mapping>()) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_CHECK(fd >= 0, prefix(path), "cannot open: ", std::strerror(errno));
  struct stat st {};
  int rc = ::fstat(fd, &st);
  int err = errno;
  if (rc != 0 || !S_ISREG(st.st_mode) || st.st_size < 8) {
    ::close(fd);
    LOOM_CHECK(rc == 0, prefix(path), "cannot stat: ", std::strerror(err));
    LOOM_CHECK(S_ISREG(st.st_mode), prefix(path), "is not a regular file");
    LOOM_FAIL(prefix(path), "the file is ", st.st_size,
              " bytes, too short to hold the 8-byte header length");
  }
  map_->size = size_t(st.st_size);
  void* p = ::mmap(nullptr, map_->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
  err = errno;
  ::close(fd);  // the mapping keeps the file
  LOOM_CHECK(p != MAP_FAILED, prefix(path), "cannot map ", map_->size,
             " bytes: ", std::strerror(err));
  map_->base = p;
  header_ = read_safetensors_header(map_->bytes(), map_->size, path);
  for (size_t i = 0; i < header_.entries.size(); ++i) by_name_[header_.entries[i].name] = i;
}

const SafetensorsEntry* MappedSafetensors::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.entries[it->second];
}

Tensor MappedSafetensors::tensor(const SafetensorsEntry& e) const {
  const SafetensorsEntry* mine = find(e.name);
  LOOM_CHECK(mine && mine->begin == e.begin && mine->end == e.end, prefix(path_), "tensor '",
             e.name, "' is not an entry of this file");
  char* p = static_cast<char*>(map_->base) + header_.data_start + e.begin;
  size_t nbytes = size_t(e.end - e.begin);
  if (nbytes == 0 || reinterpret_cast<uintptr_t>(p) % dtype_size(e.dtype) != 0 ||
      e.dtype == DType::Bool) {
    Tensor t = empty(e.shape, {.dtype = e.dtype});  // unaligned, empty or bool: a copy
    if (nbytes) std::memcpy(t.data_ptr(), p, nbytes);
    if (e.dtype == DType::Bool)  // a byte other than 0 or 1 is not a valid C++ bool: true
      for (auto* b = static_cast<uint8_t*>(t.data_ptr()); nbytes--; ++b) *b = *b != 0;
    return t;
  }
  // The storage's deleter holds the mapping, so the tensor outlives this object safely.
  DataPtr data(p, [keep = map_](void*) {});
  auto storage = std::make_shared<Storage>(std::move(data), nbytes, kCPU);
  return Tensor(
      std::make_shared<TensorImpl>(storage, e.shape, contiguous_strides(e.shape), 0, e.dtype));
}

void MappedSafetensors::release(const SafetensorsEntry& e) const {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  uintptr_t b = reinterpret_cast<uintptr_t>(map_->base) + header_.data_start + e.begin;
  uintptr_t end = b + (e.end - e.begin);
  b = (b + page - 1) / page * page;  // whole pages only: a neighbour's bytes share the edges
  end = end / page * page;
  if (end > b) ::madvise(reinterpret_cast<void*>(b), end - b, MADV_DONTNEED);
}

}  // namespace loom
