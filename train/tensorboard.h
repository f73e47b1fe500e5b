// SummaryWriter: TensorBoard event files of scalar summaries, written without TensorFlow or a
// protobuf library (TFRecord framing and the few protobuf fields by hand, see tensorboard.cpp).
// Leaves out: images, histograms, text, graphs (only add_scalar).
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace loom::train {

class SummaryWriter {
 public:
  // Creates `log_dir` if needed and a new file in it named
  // "events.out.tfevents.<unix time>.<hostname>.<pid>.<n>" (as PyTorch's SummaryWriter names it),
  // whose first event is the file version "brain.Event:2". The file is flushed at most every
  // `flush_secs` seconds, on flush(), and on destruction.
  explicit SummaryWriter(const std::string& log_dir, double flush_secs = 10.0);
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // One scalar point of the curve `tag` (e.g. "train/loss"); wall_time defaults to now.
  void add_scalar(const std::string& tag, double value, int64_t step);
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
  double flush_secs_;
  double last_flush_;
  std::mutex mu_;
};

// The pieces, exposed for tests.
namespace tensorboard {
// Event{wall_time, file_version} and Event{wall_time, step, Summary{Value{tag, simple_value}}},
// serialized as protobuf bytes.
std::string encode_file_version_event(double wall_time);
std::string encode_scalar_event(const std::string& tag, float value, int64_t step,
                                double wall_time);
// One TFRecord: uint64 length, masked CRC-32C of the length, data, masked CRC-32C of the data.
std::string frame_record(const std::string& data);
// Seconds since the Unix epoch, with sub-second precision.
double unix_time();
}  // namespace tensorboard

}  // namespace loom::train
