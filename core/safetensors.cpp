// safetensors: header JSON (nlohmann-json), its checks, and the file reads and writes.
#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"

namespace loom {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; loom writes host bytes as they are");

namespace {

using json = nlohmann::json;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::F64, "F64"}, {DType::F32, "F32"}, {DType::F16, "F16"}, {DType::BF16, "BF16"},
    {DType::I64, "I64"}, {DType::I32, "I32"}, {DType::U8, "U8"},   {DType::Bool, "BOOL"},
};

std::string prefix(const std::string& path) { return "safetensors file '" + path + "': "; }

// Where the bytes come from: a file (read with pread, so tensors go straight into their
// storage) or a buffer in memory. Reads past the end fail naming the source.
class ByteSource {
 public:
  explicit ByteSource(std::string name) : name_(std::move(name)) {}
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Exactly n bytes at `offset`, or an Error naming the source and `what` was being read.
  virtual void read(void* buf, uint64_t n, uint64_t offset, const std::string& what) const = 0;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : ByteSource(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    LOOM_CHECK(fd_ >= 0, prefix(path), "cannot open: ", std::strerror(errno));
    struct stat st {};
    int rc = ::fstat(fd_, &st);
    int err = errno;
    if (rc != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);  // the destructor does not run when the constructor throws
      LOOM_CHECK(rc == 0, prefix(path), "cannot stat: ", std::strerror(err));
      LOOM_FAIL(prefix(path), "is not a regular file");
    }
    size_ = uint64_t(st.st_size);
  }
  ~FileSource() override { ::close(fd_); }
  uint64_t size() const override { return size_; }
  void read(void* buf, uint64_t n, uint64_t offset, const std::string& what) const override {
    char* p = static_cast<char*>(buf);
    while (n > 0) {
      size_t chunk = size_t(std::min<uint64_t>(n, 1ull << 30));
      ssize_t r = ::pread(fd_, p, chunk, off_t(offset));
      if (r < 0 && errno == EINTR) continue;
      LOOM_CHECK(r > 0, prefix(name()), "reading ", what, " failed: ",
                 r == 0 ? std::string("unexpected end of file (was it truncated?)")
                        : std::strerror(errno));
      p += r;
      n -= uint64_t(r);
      offset += uint64_t(r);
    }
  }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

class MemorySource : public ByteSource {
 public:
  MemorySource(const void* data, size_t n, const std::string& name)
      : ByteSource(name), data_(static_cast<const char*>(data)), size_(n) {}
  uint64_t size() const override { return size_; }
  void read(void* buf, uint64_t n, uint64_t offset, const std::string& what) const override {
    LOOM_CHECK(offset <= size_ && n <= size_ - offset, prefix(name()), "reading ", what,
               " failed: unexpected end of data (was it truncated?)");
    if (n) std::memcpy(buf, data_ + offset, size_t(n));
  }

 private:
  const char* data_;
  uint64_t size_;
};

// Note [Safetensors header checks]
// The header comes from an untrusted file, so every field is checked before it is used: types
// (integers must be unsigned JSON integers, not floats or negatives), nesting (a legal header is
// at most three levels deep, so deeper input is refused before it is built), duplicate keys (JSON
// allows them and nlohmann would keep the last silently; we refuse), byte counts computed with
// overflow checks, and the byte ranges must tile the data section exactly.
json parse_json_strict(const std::string& text, const std::string& source) {
  std::vector<std::set<std::string>> keys;  // the keys seen in each open object
  auto check = [&](int depth, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        LOOM_CHECK(depth < 3, prefix(source),
                   "header JSON is nested deeper than a safetensors header can be");
        if (ev == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        LOOM_CHECK(!keys.empty() && keys.back().insert(k).second, prefix(source), "duplicate key '",
                   k, "' in the header", depth <= 1 ? " (two tensors with the same name)" : "");
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    LOOM_FAIL(prefix(source), "header is not valid JSON: ", e.what());
  }
}

uint64_t get_unsigned(const json& v, const std::string& source, const std::string& what) {
  LOOM_CHECK(v.is_number_unsigned(), prefix(source), what, " must be a non-negative integer, got ",
             v.dump());
  return v.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const json& v, const std::string& source) {
  std::string where = "tensor '" + name + "'";
  LOOM_CHECK(v.is_object(), prefix(source), where,
             ": expected an object {dtype, shape, data_offsets}, got ", v.type_name());
  for (const auto& [k, unused] : v.items()) {
    (void)unused;
    LOOM_CHECK(k == "dtype" || k == "shape" || k == "data_offsets", prefix(source), where,
               ": unknown field '", k, "'");
  }
  LOOM_CHECK(v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
             prefix(source), where, ": missing one of the fields dtype, shape, data_offsets");
  SafetensorsEntry e;
  e.name = name;
  const json& dt = v.at("dtype");
  LOOM_CHECK(dt.is_string(), prefix(source), where, ": dtype must be a string, got ", dt.dump());
  e.dtype = dtype_from_safetensors_name(dt.get<std::string>(), prefix(source) + where);

  const json& shape = v.at("shape");
  LOOM_CHECK(shape.is_array(), prefix(source), where, ": shape must be an array, got ",
             shape.dump());
  uint64_t numel = 1;
  for (const json& d : shape) {
    uint64_t n = get_unsigned(d, source, where + ": each size in shape");
    LOOM_CHECK(n <= uint64_t(std::numeric_limits<int64_t>::max()), prefix(source), where, ": size ",
               n, " in shape is too large");
    LOOM_CHECK(!__builtin_mul_overflow(numel, n, &numel), prefix(source), where,
               ": the number of elements of shape ", shape.dump(), " overflows");
    e.shape.push_back(int64_t(n));
  }
  uint64_t nbytes = 0;
  LOOM_CHECK(!__builtin_mul_overflow(numel, uint64_t(dtype_size(e.dtype)), &nbytes), prefix(source),
             where, ": the byte size of shape ", shape.dump(), " overflows");

  const json& off = v.at("data_offsets");
  LOOM_CHECK(off.is_array() && off.size() == 2, prefix(source), where,
             ": data_offsets must be [begin, end], got ", off.dump());
  e.begin = get_unsigned(off[0], source, where + ": data_offsets begin");
  e.end = get_unsigned(off[1], source, where + ": data_offsets end");
  LOOM_CHECK(e.begin <= e.end, prefix(source), where, ": data_offsets ", off.dump(),
             " end before they begin");
  LOOM_CHECK(e.end - e.begin == nbytes, prefix(source), where, ": ", dt.get<std::string>(), " ",
             shape.dump(), " needs ", nbytes, " bytes but data_offsets ", off.dump(), " span ",
             e.end - e.begin);
  return e;
}

}  // namespace

// ---------------------------------------------------------------- dtypes

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == t) return d.name;
  LOOM_FAIL("safetensors: dtype ", dtype_name(t), " has no safetensors name");
}

DType dtype_from_safetensors_name(const std::string& s, const std::string& where) {
  for (const auto& d : kDTypeNames)
    if (s == d.name) return d.dtype;
  LOOM_FAIL(where, ": unsupported dtype '", s,
            "' (loom reads F64, F32, F16, BF16, I64, I32, U8, BOOL)");
}

// ---------------------------------------------------------------- SafetensorsFile

bool SafetensorsFile::contains(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return true;
  return false;
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  LOOM_FAIL(prefix(path), "has no tensor named '", name, "' (it holds ", tensors.size(),
            " tensors)");
}

// ---------------------------------------------------------------- reading

SafetensorsHeader parse_safetensors_header(const std::string& json_text, uint64_t data_size,
                                           const std::string& source) {
  json root = parse_json_strict(json_text, source);
  LOOM_CHECK(root.is_object(), prefix(source), "header must be a JSON object, got ",
             root.type_name());
  SafetensorsHeader h;
  for (const auto& [key, v] : root.items()) {
    if (key == "__metadata__") {
      if (v.is_null()) continue;
      LOOM_CHECK(v.is_object(), prefix(source), "__metadata__ must be an object of strings, got ",
                 v.type_name());
      for (const auto& [mk, mv] : v.items()) {
        LOOM_CHECK(mv.is_string(), prefix(source), "__metadata__ value of '", mk,
                   "' must be a string, got ", mv.dump());
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(key, v, source));
  }
  // Tensors must tile [0, data_size) in offset order: no overlap, no gap, nothing left over.
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : h.entries) {
    LOOM_CHECK(e.begin >= expected, prefix(source), "tensor '", e.name, "' (bytes ", e.begin, "..",
               e.end, ") overlaps tensor '", prev ? prev->name : "", "' (which ends at ", expected,
               ")");
    LOOM_CHECK(e.begin == expected, prefix(source), "gap in the data: tensor '", e.name,
               "' begins at byte ", e.begin, " but the previous tensor ends at ", expected);
    expected = e.end;
    prev = &e;
  }
  if (expected > data_size) {  // name the first tensor whose bytes are not all there
    for (const auto& e : h.entries)
      LOOM_CHECK(e.end <= data_size, prefix(source), "the data section holds ", data_size,
                 " bytes but the tensors in the header cover ", expected,
                 " (the file is truncated: ", "tensor '", e.name, "' ",
                 safetensors_dtype_name(e.dtype), " ", e.shape, " needs bytes ", e.begin, "..",
                 e.end, ")");
  }
  LOOM_CHECK(expected == data_size, prefix(source), "the data section holds ", data_size,
             " bytes but the tensors in the header cover ", expected, " (extra bytes at the end)");
  return h;
}

namespace {

SafetensorsHeader read_header(const ByteSource& src) {
  const std::string& path = src.name();
  uint64_t size = src.size();
  LOOM_CHECK(size >= 8, prefix(path), "the file is ", size,
             " bytes, too short to hold the 8-byte header length");
  uint8_t len_bytes[8];
  src.read(len_bytes, 8, 0, "the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  LOOM_CHECK(n <= kMaxSafetensorsHeader, prefix(path), "header length ", n,
             " is over the limit of ", kMaxSafetensorsHeader,
             " bytes (not a safetensors file, or corrupt)");
  LOOM_CHECK(8 + n <= size, prefix(path), "header length ", n, " runs past the end of the file (",
             size, " bytes; was it truncated?)");
  std::string text(size_t(n), '\0');
  src.read(text.data(), n, 8, "the header");
  SafetensorsHeader h = parse_safetensors_header(text, size - 8 - n, path);
  h.data_start = 8 + n;
  return h;
}

SafetensorsFile read_all(const ByteSource& src) {
  SafetensorsHeader h = read_header(src);
  SafetensorsFile f;
  f.path = src.name();
  f.metadata = std::move(h.metadata);
  for (const auto& e : h.entries) {
    Tensor t = empty(e.shape, {.dtype = e.dtype});
    if (e.end > e.begin)
      src.read(t.data_ptr(), e.end - e.begin, h.data_start + e.begin, "tensor '" + e.name + "'");
    if (e.dtype == DType::Bool) {
      // Any byte other than 0 or 1 would be an invalid C++ bool: read it as true.
      auto* p = static_cast<uint8_t*>(t.data_ptr());
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0;
    }
    f.tensors.emplace_back(e.name, std::move(t));
  }
  return f;
}

}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  return read_header(FileSource(path));
}

SafetensorsHeader read_safetensors_header(const void* data, size_t n, const std::string& name) {
  return read_header(MemorySource(data, n, name));
}

SafetensorsFile read_safetensors(const std::string& path) { return read_all(FileSource(path)); }

SafetensorsFile read_safetensors(const void* data, size_t n, const std::string& name) {
  return read_all(MemorySource(data, n, name));
}

// ---------------------------------------------------------------- writing

namespace {

// The first 8 + N bytes of a file (length, header JSON padded to a multiple of 8) and the order
// in which the tensors' bytes follow it.
struct EncodedHeader {
  std::string head;
  std::vector<size_t> order;
};

EncodedHeader encode_header(const std::string& path, const NamedTensors& host_tensors,
                            const StringMap& metadata) {
  std::set<std::string> names;
  for (const auto& [name, t] : host_tensors) {
    LOOM_CHECK(name != "__metadata__", prefix(path),
               "'__metadata__' is reserved and cannot name a tensor");
    LOOM_CHECK(names.insert(name).second, prefix(path), "two tensors are named '", name, "'");
    LOOM_CHECK(t.defined(), prefix(path), "tensor '", name, "' is undefined");
    LOOM_CHECK(t.device().is_cpu() && t.is_contiguous(), prefix(path), "tensor '", name, "' is ",
               describe(t), t.is_contiguous() ? "" : " (not contiguous)",
               "; write_safetensors takes contiguous CPU tensors (save_safetensors in "
               "nn/serialize.h copies)");
  }
  EncodedHeader enc;
  // Largest elements first so every tensor starts at a multiple of its element size.
  enc.order.resize(host_tensors.size());
  for (size_t i = 0; i < enc.order.size(); ++i) enc.order[i] = i;
  std::stable_sort(enc.order.begin(), enc.order.end(), [&](size_t a, size_t b) {
    return host_tensors[a].second.element_size() > host_tensors[b].second.element_size();
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (size_t i : enc.order) {
    const auto& [name, t] = host_tensors[i];
    uint64_t nbytes = uint64_t(t.numel()) * t.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    LOOM_FAIL(prefix(path), "a tensor name or metadata string is not valid UTF-8: ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data then starts at a multiple of 8

  uint64_t n = text.size();
  enc.head.resize(8);
  for (int i = 0; i < 8; ++i) enc.head[size_t(i)] = char(uint8_t(n >> (8 * i)));
  enc.head += text;
  return enc;
}

size_t byte_size(const Tensor& t) { return size_t(t.numel()) * t.element_size(); }

}  // namespace

void write_safetensors(const std::string& path, const NamedTensors& host_tensors,
                       const StringMap& metadata) {
  EncodedHeader enc = encode_header(path, host_tensors, metadata);
  AtomicFileWriter out(path);
  out.write(enc.head.data(), enc.head.size());
  for (size_t i : enc.order) {
    const Tensor& t = host_tensors[i].second;
    if (t.numel() > 0) out.write(t.data_ptr(), byte_size(t));
  }
  out.commit();
}

std::string encode_safetensors(const NamedTensors& host_tensors, const StringMap& metadata,
                               const std::string& name) {
  EncodedHeader enc = encode_header(name, host_tensors, metadata);
  size_t total = enc.head.size();
  for (const auto& nt : host_tensors) total += byte_size(nt.second);
  std::string out = std::move(enc.head);
  out.reserve(total);
  for (size_t i : enc.order) {
    const Tensor& t = host_tensors[i].second;
    if (t.numel() > 0) out.append(static_cast<const char*>(t.data_ptr()), byte_size(t));
  }
  return out;
}

}  // namespace loom
