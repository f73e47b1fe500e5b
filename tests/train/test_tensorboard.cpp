// train/tensorboard: CRC-32C and its TFRecord mask, protobuf bytes of the events, record framing,
// and a written event file decoded back in C++ (tests/train/read_tensorboard.py reads one with the
// tensorboard package).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/crc32c.h"
#include "core/error.h"
#include "train/tensorboard.h"

using namespace loom;
using namespace loom::train;
namespace fs = std::filesystem;

namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(char(c));
  return s;
}

uint64_t le(const std::string& s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | uint8_t(s[at + size_t(i)]);
  return v;
}

// A minimal protobuf reader for the test: the fields of one message, by number.
struct Field {
  uint32_t number, type;
  uint64_t varint = 0;
  std::string bytes;  // length-delimited payload, or the raw fixed-width bytes
};
std::vector<Field> decode(const std::string& m) {
  std::vector<Field> out;
  size_t i = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      uint8_t b = uint8_t(m.at(i++));
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (i < m.size()) {
    uint64_t key = varint();
    Field f{uint32_t(key >> 3), uint32_t(key & 7), 0, {}};
    if (f.type == 0)
      f.varint = varint();
    else if (f.type == 1) {
      f.bytes = m.substr(i, 8);
      i += 8;
    } else if (f.type == 5) {
      f.bytes = m.substr(i, 4);
      i += 4;
    } else if (f.type == 2) {
      uint64_t n = varint();
      f.bytes = m.substr(i, n);
      i += n;
    } else
      ADD_FAILURE() << "wire type " << f.type;
    out.push_back(f);
  }
  return out;
}

}  // namespace

TEST(TensorBoard, Crc32cKnownAnswers) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  // Masked as TFRecord does; the value agrees with tensorboard's Python masked_crc32c.
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xC78AB0E5u);
}

TEST(TensorBoard, ScalarEventBytes) {
  // Event{wall_time=0.0 (field 1, fixed64), step=3 (field 2, varint),
  //       summary (field 5) = Summary{value (field 1) = Value{tag "a" (1), simple_value 1.0f (2)}}}
  std::string want = bytes({0x09, 0,    0,    0,    0,    0,    0,    0,   0,  //
                            0x10, 0x03,                                        //
                            0x2a, 0x0a, 0x0a, 0x08,                            //
                            0x0a, 0x01, 'a',  0x15, 0x00, 0x00, 0x80, 0x3f});
  EXPECT_EQ(tensorboard::encode_scalar_event("a", 1.0f, 3, 0.0), want);
  // Varints: 300 = 0xac 0x02; -1 as int64 takes ten bytes.
  std::string e = tensorboard::encode_scalar_event("a", 1.0f, 300, 0.0);
  EXPECT_EQ(e.substr(9, 3), bytes({0x10, 0xac, 0x02}));
  e = tensorboard::encode_scalar_event("a", 1.0f, -1, 0.0);
  EXPECT_EQ(e.substr(9, 11),
            bytes({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  // The file-version event: wall_time 1.5, file_version (field 3) "brain.Event:2".
  std::string v = tensorboard::encode_file_version_event(1.5);
  EXPECT_EQ(v.substr(0, 9), bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f}));
  EXPECT_EQ(v.substr(9), bytes({0x1a, 13}) + "brain.Event:2");
}

TEST(TensorBoard, RecordFraming) {
  std::string data = tensorboard::encode_scalar_event("a", 1.0f, 3, 0.0);  // 23 bytes
  std::string r = tensorboard::frame_record(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(le(r, 0, 8), data.size());
  EXPECT_EQ(le(r, 8, 4), 0x1EF8CEE7u);  // masked CRC of the 8 length bytes (tensorboard agrees)
  EXPECT_EQ(r.substr(12, data.size()), data);
  EXPECT_EQ(le(r, 12 + data.size(), 4), masked_crc32c(data.data(), data.size()));
}

TEST(TensorBoard, WriterFileDecodesBack) {
  std::string tmpl = (fs::temp_directory_path() / "loom_tb_XXXXXX").string();
  std::string dir = std::string(mkdtemp(tmpl.data())) + "/run1";  // created by the writer
  std::string path;
  {
    SummaryWriter w(dir);
    path = w.path();
    for (int s = 0; s < 5; ++s) w.add_scalar("train/loss", 2.0 / (s + 1), s, 100.0 + s);
    w.add_scalar("lr", 0.1, int64_t(1) << 40, 7.0);
    SummaryWriter other(dir);  // same folder, same second: a different file
    EXPECT_NE(other.path(), path);
  }  // the destructor flushes
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(dir));
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;

  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::string> events;
  for (size_t at = 0; at < file.size();) {
    ASSERT_LE(at + 12, file.size());
    uint64_t n = le(file, at, 8);
    EXPECT_EQ(le(file, at + 8, 4), masked_crc32c(file.data() + at, 8));
    ASSERT_LE(at + 16 + n, file.size());
    std::string data = file.substr(at + 12, n);
    EXPECT_EQ(le(file, at + 12 + n, 4), masked_crc32c(data.data(), data.size()));
    events.push_back(data);
    at += 16 + n;
  }
  ASSERT_EQ(events.size(), 7u);
  auto first = decode(events[0]);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[1].number, 3u);
  EXPECT_EQ(first[1].bytes, "brain.Event:2");
  for (int s = 0; s < 6; ++s) {
    auto f = decode(events[size_t(s) + 1]);
    ASSERT_EQ(f.size(), 3u);
    double wall;
    std::memcpy(&wall, f[0].bytes.data(), 8);
    auto value = decode(decode(f[2].bytes).at(0).bytes);
    ASSERT_EQ(value.size(), 2u);
    float simple;
    std::memcpy(&simple, value[1].bytes.data(), 4);
    if (s < 5) {
      EXPECT_EQ(wall, 100.0 + s);
      EXPECT_EQ(f[1].varint, uint64_t(s));
      EXPECT_EQ(value[0].bytes, "train/loss");
      EXPECT_EQ(simple, float(2.0 / (s + 1)));
    } else {
      EXPECT_EQ(f[1].varint, uint64_t(1) << 40);
      EXPECT_EQ(value[0].bytes, "lr");
      EXPECT_EQ(simple, 0.1f);
    }
  }
  fs::remove_all(fs::path(dir).parent_path());
}

TEST(TensorBoard, UnwritableFolderIsAnError) {
  EXPECT_THROW({ SummaryWriter w("/proc/loom-cannot-create-this"); }, Error);
}
