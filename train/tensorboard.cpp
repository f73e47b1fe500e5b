// TensorBoard event files by hand: a tiny protobuf encoder (varints, fixed-width numbers,
// length-delimited fields) and TFRecord framing.
#include "train/tensorboard.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/crc32c.h"
#include "core/error.h"

namespace loom::train {

namespace tensorboard {

namespace {

// Note [Protobuf by hand]
// A protobuf message is a sequence of fields, each a key varint (field_number << 3 | wire_type)
// followed by the value: wire type 0 = varint, 1 = 8 little-endian bytes, 2 = varint length then
// that many bytes (strings and nested messages), 5 = 4 little-endian bytes. The fields we write:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// (from tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto).

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(uint8_t(v)));
}

void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (uint64_t(field) << 3) | type);
}

template <typename T>
void put_little_endian(std::string& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the host is little-endian (checked in core/safetensors.cpp)
  out.append(reinterpret_cast<const char*>(b), sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time) {
  std::string e;
  put_key(e, 1, kFixed64);
  put_little_endian(e, wall_time);
  return e;
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  std::string e = event_header(wall_time);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string encode_scalar_event(const std::string& tag, float value, int64_t step,
                                double wall_time) {
  std::string v;  // Value
  put_bytes(v, 1, tag);
  put_key(v, 2, kFixed32);
  put_little_endian(v, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_header(wall_time);
  put_key(e, 2, kVarint);
  put_varint(e, uint64_t(step));  // int64: negative steps take ten bytes, as protobuf specifies
  put_bytes(e, 5, summary);
  return e;
}

std::string frame_record(const std::string& data) {
  std::string r;
  uint64_t len = data.size();
  std::string len_bytes;
  put_little_endian(len_bytes, len);
  r += len_bytes;
  put_little_endian(r, masked_crc32c(len_bytes.data(), len_bytes.size()));
  r += data;
  put_little_endian(r, masked_crc32c(data.data(), data.size()));
  return r;
}

double unix_time() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace tensorboard

SummaryWriter::SummaryWriter(const std::string& log_dir, double flush_secs)
    : flush_secs_(flush_secs) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  LOOM_CHECK(!ec, "SummaryWriter: cannot create log folder '", log_dir, "': ", ec.message());
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  static std::atomic<int> counter{0};
  double now = tensorboard::unix_time();
  path_ = (std::filesystem::path(log_dir) /
           ("events.out.tfevents." + std::to_string(int64_t(now)) + "." + host + "." +
            std::to_string(::getpid()) + "." + std::to_string(counter++)))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  LOOM_CHECK(file_ != nullptr, "SummaryWriter: cannot create '", path_,
             "': ", std::strerror(errno));
  last_flush_ = now;
  try {
    write_record(tensorboard::encode_file_version_event(now));
    flush();
  } catch (...) {
    std::fclose(file_);
    throw;
  }
}

SummaryWriter::~SummaryWriter() {
  if (file_) std::fclose(file_);  // fclose flushes
}

void SummaryWriter::write_record(const std::string& event) {
  std::string r = tensorboard::frame_record(event);
  LOOM_CHECK(std::fwrite(r.data(), 1, r.size(), file_) == r.size(), "SummaryWriter: writing '",
             path_, "' failed: ", std::strerror(errno));
}

void SummaryWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalar(tag, value, step, tensorboard::unix_time());
}

void SummaryWriter::add_scalar(const std::string& tag, double value, int64_t step,
                               double wall_time) {
  std::lock_guard<std::mutex> lock(mu_);
  write_record(tensorboard::encode_scalar_event(tag, float(value), step, wall_time));
  double now = tensorboard::unix_time();
  if (now - last_flush_ >= flush_secs_) {
    std::fflush(file_);
    last_flush_ = now;
  }
}

void SummaryWriter::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  LOOM_CHECK(std::fflush(file_) == 0, "SummaryWriter: flushing '", path_,
             "' failed: ", std::strerror(errno));
}

}  // namespace loom::train
