// core/safetensors_mapped: a mapped file gives the same header and bits as read_safetensors,
// without the CPU allocator (the tensors are the file's pages); tensors outlive the object; writes
// stay private; unaligned and bool data are copied; broken files are Errors naming the file.
#include <gtest/gtest.h>

#include <cstring>

#include "core/allocator.h"
#include "core/safetensors_mapped.h"
#include "support/temp_files.h"

using namespace loom;
using loom::test::read_bytes;
using loom::test::TempDir;
using loom::test::write_bytes;

namespace {

NamedTensors some_tensors() {
  std::vector<float> big(3000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = float(i) * 0.25f - 7.0f;
  return {{"f32", from_vector(big, {30, 100})},
          {"f64", from_vector<double>({-0.0, 1e-310, 1.0 / 3.0}, {3})},
          {"i64", from_vector<int64_t>({INT64_MIN, 7}, {2, 1})},
          {"u8", from_vector<uint8_t>({1, 2, 3}, {3})},
          {"bool", from_vector<bool>({true, false}, {2})},
          {"empty", empty({0, 4})}};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const size_t n = size_t(a.numel()) * a.element_size();  // an empty tensor may have no data
  return n == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), n) == 0;
}

// A file from a header text and data bytes exactly as given (no padding).
std::string make_file(const std::string& header, const std::string& data) {
  std::string f(8, '\0');
  for (int i = 0; i < 8; ++i) f[size_t(i)] = char(uint8_t(uint64_t(header.size()) >> (8 * i)));
  return f + header + data;
}

void expect_error(const std::string& path, const std::string& what) {
  try {
    MappedSafetensors m(path);
    ADD_FAILURE() << "no error mapping " << path << " (expected '" << what << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(MappedSafetensors, SameHeaderAndBitsAsReading) {
  TempDir dir;
  std::string path = dir.file("a.safetensors");
  write_safetensors(path, some_tensors(), {{"format", "pt"}});
  SafetensorsFile want = read_safetensors(path);
  MappedSafetensors m(path);
  EXPECT_EQ(m.header().metadata, want.metadata);
  EXPECT_EQ(m.header().data_start, read_safetensors_header(path).data_start);
  ASSERT_EQ(m.header().entries.size(), want.tensors.size());
  for (const auto& [name, t] : want.tensors) {
    const SafetensorsEntry* e = m.find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_TRUE(same_bits(m.tensor(*e), t)) << name;
  }
  EXPECT_EQ(m.find("nope"), nullptr);
}

// The float32 tensor is the mapped page range itself: mapping it allocates nothing, and its
// address lies inside the file's mapping.
TEST(MappedSafetensors, TensorsAreTheMappedBytes) {
  TempDir dir;
  std::string path = dir.file("a.safetensors");
  write_safetensors(path, some_tensors());
  MappedSafetensors m(path);
  CpuAllocStats before = cpu_alloc_stats();
  Tensor t = m.tensor(*m.find("f32"));
  EXPECT_EQ(cpu_alloc_stats().allocations, before.allocations);
  EXPECT_EQ(t.data<float>()[4], 4 * 0.25f - 7.0f);
  // A second tensor of the same entry shares the bytes.
  EXPECT_EQ(m.tensor(*m.find("f32")).data_ptr(), t.data_ptr());
}

TEST(MappedSafetensors, TensorsOutliveTheObjectAndWritesStayPrivate) {
  TempDir dir;
  std::string path = dir.file("a.safetensors");
  write_safetensors(path, some_tensors());
  std::string bytes = read_bytes(path);
  Tensor t;
  {
    MappedSafetensors m(path);
    t = m.tensor(*m.find("f32"));
  }
  EXPECT_EQ(t.data<float>()[2999], 2999 * 0.25f - 7.0f);  // still mapped
  t.data<float>()[0] = 123.0f;                            // copy-on-write: the file is untouched
  EXPECT_EQ(t.data<float>()[0], 123.0f);
  EXPECT_TRUE(read_bytes(path) == bytes);
  MappedSafetensors again(path);
  EXPECT_EQ(again.tensor(*again.find("f32")).data<float>()[0], -7.0f);
}

TEST(MappedSafetensors, ReleaseKeepsTensorsReadable) {
  TempDir dir;
  std::string path = dir.file("a.safetensors");
  write_safetensors(path, some_tensors());
  MappedSafetensors m(path);
  const SafetensorsEntry& e = *m.find("f32");
  Tensor t = m.tensor(e);
  Tensor copy = from_vector(t.to_vector<float>(), t.shape());
  m.release(e);  // the pages come back from the page cache on the next read
  EXPECT_TRUE(same_bits(t, copy));
}

// Data that starts at an odd offset (a writer that does not pad the header) and bool bytes other
// than 0 and 1 are copied: an aligned float64, and true.
TEST(MappedSafetensors, UnalignedAndBoolDataAreCopied) {
  TempDir dir;
  std::string path = dir.file("odd.safetensors");
  double v = 2.5;
  std::string data(reinterpret_cast<const char*>(&v), 8);
  data += std::string("\x07\x00", 2);
  std::string header = R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"BOOL","shape":[2],"data_offsets":[8,10]}})";
  if ((8 + header.size()) % 8 == 0) header += " ";  // make the data start unaligned
  write_bytes(path, make_file(header, data));
  MappedSafetensors m(path);
  Tensor d = m.tensor(*m.find("d"));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d.data_ptr()) % 8, 0u);
  EXPECT_EQ(d.data<double>()[0], 2.5);
  Tensor b = m.tensor(*m.find("b"));
  EXPECT_EQ(static_cast<const uint8_t*>(b.data_ptr())[0], 1);
  EXPECT_EQ(static_cast<const uint8_t*>(b.data_ptr())[1], 0);
}

TEST(MappedSafetensors, BrokenFilesAreErrorsNamingTheFile) {
  TempDir dir;
  expect_error(dir.file("missing.safetensors"), "cannot open");
  expect_error(dir.path, "not a regular file");
  write_bytes(dir.file("short"), "1234");
  expect_error(dir.file("short"), "too short");
  std::string path = dir.file("a.safetensors");
  write_safetensors(path, some_tensors());
  std::string bytes = read_bytes(path);
  write_bytes(path, bytes.substr(0, bytes.size() - 1));  // the last tensor in data order: "bool"
  expect_error(path, "tensor 'bool' BOOL [2] needs bytes");
  write_bytes(path, bytes.substr(0, 20));
  expect_error(path, "runs past the end of the file");
  write_bytes(path, bytes);
  MappedSafetensors a(path);
  SafetensorsEntry other{"f32", DType::F32, {1}, 0, 4};  // not one of a's entries
  EXPECT_THROW(a.tensor(other), Error);
}
