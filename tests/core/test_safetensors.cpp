// core/safetensors and core/atomic_file: round trips of every dtype (bit-exact), the byte layout,
// hand-built files, every kind of corrupt file (an Error naming the file, never a crash).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/atomic_file.h"
#include "core/crc32c.h"
#include "core/safetensors.h"
#include "support/temp_files.h"

using namespace loom;
using loom::test::read_bytes;
using loom::test::TempDir;
using loom::test::write_bytes;
namespace fs = std::filesystem;

namespace {

// A file from a header text and data bytes, exactly as given (no padding, no checks).
std::string make_file(const std::string& header, const std::string& data) {
  std::string f(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f[size_t(i)] = char(uint8_t(n >> (8 * i)));
  return f + header + data;
}

Tensor halves(const std::vector<uint16_t>& bits, const Shape& shape) {
  std::vector<Half> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i].bits = bits[i];
  return from_vector(v, shape);
}

Tensor bfloats(const std::vector<uint16_t>& bits, const Shape& shape) {
  std::vector<BFloat16> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i].bits = bits[i];
  return from_vector(v, shape);
}

// One tensor of every dtype, with awkward values: signed zeros, NaN payloads, subnormals,
// infinities, extreme integers; a 0-d and two empty tensors.
NamedTensors every_dtype() {
  return {
      {"u8", from_vector<uint8_t>({0, 1, 127, 128, 255}, {5})},
      {"f64", from_vector<double>({-0.0, 1e-310, 1.0 / 3.0, -1e308, INFINITY, NAN}, {2, 3})},
      {"bool", from_vector<bool>({true, false, true, true}, {2, 2})},
      {"f16",
       halves({0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0xfc00, 0x7e01}, {3, 3})},
      {"bf16",
       bfloats({0x3f80, 0xc040, 0x7f80, 0x0001, 0x7fc1, 0x4049, 0x8000, 0xff81}, {2, 2, 2})},
      {"i64", from_vector<int64_t>({INT64_MIN, -1, 0, 1, INT64_MAX}, {5, 1})},
      {"i32", from_vector<int32_t>({INT32_MIN, 7, INT32_MAX, 0}, {2, 2})},
      {"f32", from_vector<float>({1.5f, -2.25f, 3.4e38f, -1e-45f, NAN, -0.0f}, {6})},
      {"scalar", from_vector<float>({3.5f}, {})},
      {"empty", empty({0, 3}, {.dtype = kF32})},
      {"empty_i64", empty({4, 0}, {.dtype = kI64})},
  };
}

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& name) {
  ASSERT_EQ(a.dtype(), b.dtype()) << name;
  ASSERT_EQ(a.shape(), b.shape()) << name;
  ASSERT_TRUE(b.is_contiguous() && b.device().is_cpu()) << name;
  size_t n = size_t(a.numel()) * a.element_size();
  if (n) {
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), n), 0) << name;
  }
}

// Expects an Error whose message names `path` and contains `what`.
void expect_error(const std::string& path, const std::string& what) {
  try {
    read_safetensors(path);
    ADD_FAILURE() << "no error reading " << path << " (expected '" << what << "')";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in: " << msg;
  }
}

}  // namespace

TEST(Crc32c, KnownAnswers) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(crc32c("", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of zeros
  // Continuing a CRC over two pieces equals the CRC of the whole.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
  EXPECT_EQ(crc32c_table("123456789", 9), 0xE3069283u);
}

TEST(Crc32c, FastPathMatchesTheTable) {
  std::mt19937 rng(5);
  std::string buf(4096 + 64, '\0');
  for (char& c : buf) c = char(rng());
  for (size_t start = 0; start < 9; ++start)
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(63),
                     size_t(1000), size_t(4096)}) {
      uint32_t seed = rng();
      EXPECT_EQ(crc32c(buf.data() + start, n, seed), crc32c_table(buf.data() + start, n, seed))
          << "start " << start << " n " << n;
    }
}

TEST(Safetensors, RoundTripEveryDTypeBitExact) {
  TempDir dir;
  NamedTensors in = every_dtype();
  StringMap meta = {{"producer", "loom"}, {"note", "ünïcödé ✓"}, {"empty", ""}};
  write_safetensors(dir.file("a.safetensors"), in, meta);
  SafetensorsFile f = read_safetensors(dir.file("a.safetensors"));
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), in.size());
  for (const auto& [name, t] : in) {
    ASSERT_TRUE(f.contains(name)) << name;
    expect_same_bits(t, f.at(name), name);
  }
  EXPECT_EQ(f.at("scalar").dim(), 0);
  EXPECT_EQ(f.at("scalar").data<float>()[0], 3.5f);
  EXPECT_FALSE(f.contains("nope"));
  EXPECT_THROW(f.at("nope"), Error);
}

TEST(Safetensors, ByteLayoutMatchesTheSpec) {
  TempDir dir;
  std::string path = dir.file("layout.safetensors");
  NamedTensors in = every_dtype();
  write_safetensors(path, in, {{"k", "v"}});
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ(n % 8, 0u) << "header padded to a multiple of 8";
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header[0], '{');
  auto j = nlohmann::json::parse(header);  // trailing pad is spaces, which JSON allows
  EXPECT_EQ(j["__metadata__"]["k"], "v");
  // The spec's dtype strings, spelled out here (never taken from the code under test).
  const std::map<std::string, std::string> spec_dtype = {
      {"u8", "U8"},      {"f64", "F64"},   {"bool", "BOOL"},    {"f16", "F16"},
      {"bf16", "BF16"},  {"i64", "I64"},   {"i32", "I32"},      {"f32", "F32"},
      {"scalar", "F32"}, {"empty", "F32"}, {"empty_i64", "I64"}};
  ASSERT_EQ(spec_dtype.size(), in.size());
  // Offsets tile the data section in order; each tensor is aligned to its element size.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, t] : in) {
    const auto& e = j.at(name);
    EXPECT_EQ(e["dtype"], spec_dtype.at(name)) << name;
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), t.shape()) << name;
    uint64_t b = e["data_offsets"][0], end = e["data_offsets"][1];
    EXPECT_EQ(end - b, uint64_t(t.numel()) * t.element_size()) << name;
    EXPECT_EQ((8 + n + b) % t.element_size(), 0u) << name << " is misaligned";
    ranges.emplace_back(b, end);
    // The bytes at that range are the tensor's little-endian bytes.
    if (t.numel()) {
      EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + b, t.data_ptr(), end - b), 0) << name;
    }
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (auto [b, e] : ranges) {
    EXPECT_EQ(b, at);
    at = e;
  }
  EXPECT_EQ(8 + n + at, bytes.size());
}

// Every dtype's name, both ways, against the spec's literal strings: a consistent rename in the
// writer and the reader would still round-trip, so only literals catch it.
TEST(Safetensors, DTypeNamesAreTheSpecsStrings) {
  const std::vector<std::pair<DType, std::string>> spec = {
      {kF64, "F64"}, {kF32, "F32"}, {kF16, "F16"}, {kBF16, "BF16"},
      {kI64, "I64"}, {kI32, "I32"}, {kU8, "U8"},   {kBool, "BOOL"}};
  ASSERT_EQ(spec.size(), 8u) << "one entry per loom dtype";
  for (const auto& [t, name] : spec) {
    EXPECT_STREQ(safetensors_dtype_name(t), name.c_str()) << dtype_name(t);
    EXPECT_EQ(dtype_from_safetensors_name(name, "test"), t) << name;
  }
  // A hand-built file naming each dtype literally reads back as that dtype.
  TempDir dir;
  for (const auto& [t, name] : spec) {
    std::string path = dir.file(name + ".safetensors");
    size_t nbytes = dtype_size(t);
    std::string header = R"({"x":{"dtype":")" + name + R"(","shape":[1],"data_offsets":[0,)" +
                         std::to_string(nbytes) + "]}}";
    write_bytes(path, make_file(header, std::string(nbytes, '\x01')));
    SafetensorsFile f = read_safetensors(path);
    EXPECT_EQ(f.at("x").dtype(), t) << name;
  }
}

TEST(Safetensors, ReadsAHandBuiltFile) {
  TempDir dir;
  std::string path = dir.file("hand.safetensors");
  // Two I32 values and a 0-d F64, as another writer could lay them out (F64 after I32, unpadded).
  std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F64","shape":[],"data_offsets":[8,16]},)"
      R"("a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})";
  std::string data("\x01\x00\x00\x00\xff\xff\xff\xff", 8);
  double two = 2.0;
  data.append(reinterpret_cast<const char*>(&two), 8);
  write_bytes(path, make_file(header, data));
  SafetensorsFile f = read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].first, "a");  // file (data) order
  EXPECT_EQ(f.at("a").data<int32_t>()[0], 1);
  EXPECT_EQ(f.at("a").data<int32_t>()[1], -1);
  EXPECT_EQ(f.at("b").data<double>()[0], 2.0);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  // A BOOL byte other than 0/1 reads as true (never an invalid bool).
  write_bytes(path, make_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                              std::string("\x00\x02\x01", 3)));
  Tensor m = read_safetensors(path).at("m");
  const auto* mb = static_cast<const uint8_t*>(m.data_ptr());
  EXPECT_EQ(mb[0], 0);
  EXPECT_EQ(mb[1], 1);
  EXPECT_EQ(mb[2], 1);
  // An empty header with no tensors is a valid (empty) file.
  write_bytes(path, make_file("{}      ", ""));
  EXPECT_TRUE(read_safetensors(path).tensors.empty());
}

TEST(Safetensors, CorruptFilesNameTheFileAndTheDefect) {
  TempDir dir;
  std::string p = dir.file("bad.safetensors");
  auto entry = [](const char* name, const char* dtype, const char* shape, const char* offsets) {
    return std::string("\"") + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":" + offsets + "}";
  };
  auto check = [&](const std::string& file_bytes, const std::string& what) {
    write_bytes(p, file_bytes);
    expect_error(p, what);
  };
  std::string d8(8, '\x07');
  check(std::string("\x05\x00\x00", 3), "too short");
  check(make_file("{}", "").substr(0, 8), "runs past the end");
  {
    std::string f = make_file("{}", "");
    f[3] = '\x7f';  // header length ~ 2 GB
    check(f, "over the limit");
  }
  check(make_file("{\"a\": [1, 2", ""), "not valid JSON");
  check(make_file("[1, 2]", ""), "must be a JSON object");
  check(make_file("{" + entry("a", "I16", "[4]", "[0,8]") + "}", d8), "unsupported dtype 'I16'");
  check(make_file("{" + entry("a", "F8_E4M3", "[8]", "[0,8]") + "}", d8), "unsupported dtype");
  check(make_file("{" + entry("a", "F32", "[3]", "[0,8]") + "}", d8), "needs 12 bytes");
  check(make_file(
            "{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[1]", "[2,6]") + "}",
            std::string(6, 'x')),
        "overlaps");
  check(make_file("{" + entry("a", "F32", "[1]", "[0,4]") + "," +
                      entry("b", "F32", "[1]", "[8,12]") + "}",
                  std::string(12, 'x')),
        "gap in the data");
  check(make_file("{" + entry("a", "F32", "[1]", "[4,8]") + "}", d8), "gap in the data");
  check(make_file("{" + entry("a", "F32", "[1]", "[0,4]") + "}", d8), "extra bytes");
  check(make_file("{" + entry("a", "F64", "[2]", "[0,16]") + "}", d8), "truncated");
  check(make_file(
            "{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("a", "F32", "[1]", "[4,8]") + "}",
            d8),
        "duplicate key 'a'");
  check(make_file("{" + entry("a", "F32", "[-1]", "[0,4]") + "}", d8), "non-negative integer");
  check(make_file("{" + entry("a", "F32", "[1.5]", "[0,4]") + "}", d8), "non-negative integer");
  check(make_file("{" + entry("a", "F32", "[1]", "[0,4,8]") + "}", d8),
        "data_offsets must be [begin, end]");
  check(make_file("{" + entry("a", "F32", "[1]", "[8,4]") + "}", d8), "end before they begin");
  check(make_file("{" + entry("a", "F32", "[4294967296,4294967296,4294967296]", "[0,8]") + "}", d8),
        "overflows");
  check(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", d8),
        "unknown field 'x'");
  check(make_file(R"({"a":{"dtype":"F32","shape":[2]}})", d8), "missing one of the fields");
  check(make_file(R"({"a":5})", d8), "expected an object");
  check(make_file(R"({"__metadata__":{"k":5}})", ""), "must be a string");
  check(make_file(R"({"__metadata__":{"k":"a","k":"b"}})", ""), "duplicate key 'k'");
  check(make_file(R"({"a":{"dtype":"F32","shape":[[[1]]],"data_offsets":[0,4]}})", d8),
        "nested deeper");
  check(make_file(std::string(1000000, '['), ""), "nested deeper");
  expect_error(dir.file("missing.safetensors"), "cannot open");
  expect_error(dir.path, "not a regular file");
}

// Note [Fuzzing the reader]
// Truncating a valid file anywhere must fail with an Error (every byte of a file is needed), and
// overwriting any byte with hostile values must either load or fail with an Error: never crash,
// hang or throw anything else (bad_alloc from a huge claimed size, say).
TEST(Safetensors, TruncatedOrCorruptedAnywhereIsAnErrorNeverACrash) {
  TempDir dir;
  std::string good = dir.file("good.safetensors");
  NamedTensors in = {{"w", from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                     {"b", from_vector<int64_t>({7, -8}, {2})},
                     {"h", halves({0x3c00, 0x7e00}, {2})},
                     {"m", from_vector<bool>({true, false}, {2})},
                     {"s", from_vector<uint8_t>({9}, {})}};
  write_safetensors(good, in, {{"epoch", "3"}});
  std::string bytes = read_bytes(good);
  const std::string name = "fuzz.safetensors";
  // The in-memory reader runs the same checks as the file reader, so thousands of variants are
  // cheap; a sample of truncations also goes through real files below.
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_THROW(read_safetensors(bytes.data(), len, name), Error)
        << "truncated to " << len << " of " << bytes.size();
  }
  std::string p = dir.file(name);
  for (size_t len = 0; len < bytes.size(); len += 13) {
    write_bytes(p, bytes.substr(0, len));
    EXPECT_THROW(read_safetensors(p), Error) << "file truncated to " << len;
  }
  int loaded = 0, errors = 0;
  const char hostile[] = {'\0', '\xff', '"', '{',  '}',    '[', ']', '9',
                          '-',  ',',    ':', '\\', '\x80', ' ', 'e'};
  for (size_t pos = 0; pos < bytes.size(); ++pos) {
    for (char c : hostile) {
      if (bytes[pos] == c) continue;
      std::string bad = bytes;
      bad[pos] = c;
      try {
        read_safetensors(bad.data(), bad.size(), name);
        ++loaded;
      } catch (const Error& e) {
        ++errors;
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_GT(errors, 1000);
  EXPECT_GT(loaded, 0);  // data bytes and pad spaces can change without breaking the format
  // Random garbage of random lengths, half of it with a plausible header length.
  std::mt19937 rng(123);
  for (int i = 0; i < 5000; ++i) {
    std::string junk(size_t(rng() % 300), '\0');
    for (char& ch : junk) ch = char(rng());
    if (junk.size() >= 8 && i % 2) {
      uint64_t n = rng() % (junk.size() - 7);
      for (int k = 0; k < 8; ++k) junk[size_t(k)] = char(uint8_t(n >> (8 * k)));
    }
    EXPECT_THROW(read_safetensors(junk.data(), junk.size(), name), Error);
  }
}

TEST(Safetensors, WriterRejectsBadInputAndLeavesTheOldFile) {
  TempDir dir;
  std::string path = dir.file("w.safetensors");
  write_safetensors(path, {{"a", from_vector<float>({1, 2}, {2})}});
  std::string before = read_bytes(path);
  Tensor base = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor transposed = make_view(base, {3, 2}, {1, 3}, 0);
  EXPECT_THROW(write_safetensors(path, {{"t", transposed}}), Error);  // not contiguous
  EXPECT_THROW(write_safetensors(path, {{"a", base}, {"a", base}}), Error);
  EXPECT_THROW(write_safetensors(path, {{"__metadata__", base}}), Error);
  EXPECT_THROW(write_safetensors(path, {{"u", Tensor()}}), Error);
  EXPECT_THROW(write_safetensors(path, {{std::string("bad\xff", 4), base}}), Error);  // not UTF-8
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_THROW(write_safetensors(dir.file("no/such/folder/x.safetensors"), {{"a", base}}), Error);
  for (const auto& e : fs::directory_iterator(dir.path))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(AtomicFile, UncommittedWriteLeavesTheTargetUntouched) {
  TempDir dir;
  std::string path = dir.file("t.bin");
  write_bytes(path, "old");
  {
    AtomicFileWriter w(path);
    w.write("new contents", 12);
    EXPECT_TRUE(fs::exists(w.temp_path()));
    EXPECT_EQ(w.temp_path(), atomic_temp_path(path, long(getpid())));
    EXPECT_EQ(read_bytes(path), "old");
  }  // destroyed without commit: the temporary goes away
  EXPECT_EQ(read_bytes(path), "old");
  EXPECT_FALSE(fs::exists(atomic_temp_path(path, long(getpid()))));
  {
    AtomicFileWriter w(path);
    w.write("new", 3);
    w.commit();
    EXPECT_THROW(w.write("x", 1), Error);
  }
  EXPECT_EQ(read_bytes(path), "new");
  EXPECT_EQ(fs::directory_iterator(dir.path)->path().filename(), "t.bin");
}
