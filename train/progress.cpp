// EpochProgress and the epoch summary line.
#include "train/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace loom::train {

namespace {

// printf into a std::string.
template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, fmt, args...);
  return std::string(buf, size_t(n < 0 ? 0 : std::min<int>(n, int(sizeof buf) - 1)));
}

}  // namespace

double steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<long long>(std::llround(seconds));
  if (s >= 3600) return format("%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return format("%lld:%02lld", s / 60, s % 60);
}

EpochProgress::EpochProgress(int64_t epoch, int64_t epochs, int64_t total_steps,
                             ProgressOptions opt)
    : epoch_(epoch), epochs_(epochs), total_(total_steps), opt_(std::move(opt)) {
  if (!opt_.out) opt_.out = &std::cout;
  if (!opt_.clock) opt_.clock = steady_seconds;
  bar_ = opt_.style == ProgressStyle::Bar ||
         (opt_.style == ProgressStyle::Auto && ::isatty(STDOUT_FILENO) && opt_.out == &std::cout);
  start_ = opt_.clock();
}

EpochProgress::~EpochProgress() {
  if (!finished_) finish();
}

double EpochProgress::seconds() const { return (finished_ ? end_ : opt_.clock()) - start_; }

double EpochProgress::samples_per_second() const {
  double t = seconds();
  return t > 0 ? double(samples_) / t : 0.0;
}

double EpochProgress::ms_per_step() const {
  return done_ ? 1000.0 * seconds() / double(done_) : 0.0;
}

std::string EpochProgress::status_line() const {
  double t = seconds();
  double eta = (done_ > 0 && total_ > done_) ? t / double(done_) * double(total_ - done_) : 0.0;
  std::string head = format("epoch %lld/%lld", (long long)epoch_, (long long)epochs_);
  std::string tail =
      format("  loss %.4f  %.0f %s  ", mean_loss(), samples_per_second(), opt_.rate_unit);
  tail += done_ >= total_ ? "time " + format_duration(t) : "ETA " + format_duration(eta);
  if (bar_) {
    int w = opt_.bar_width;
    int filled = total_ > 0 ? int(std::min<int64_t>(w, done_ * w / total_)) : w;
    std::string bar(size_t(filled), '=');
    if (filled < w) bar += '>' + std::string(size_t(w - filled - 1), ' ');
    return head + " [" + bar + "] " + format("%lld/%lld", (long long)done_, (long long)total_) +
           tail;
  }
  int pct = total_ > 0 ? int(done_ * 100 / total_) : 100;
  return head + format("  step %lld/%lld (%d%%)", (long long)done_, (long long)total_, pct) + tail;
}

void EpochProgress::draw(bool force) {
  double now = opt_.clock();
  if (!force && now - last_draw_ < opt_.redraw_secs) return;
  last_draw_ = now;
  // \r returns to the line start; ESC[K erases what a longer previous line left behind.
  *opt_.out << '\r' << status_line() << "\x1b[K" << std::flush;
}

void EpochProgress::step(double loss, int64_t samples) {
  ++done_;
  samples_ += samples;
  loss_sum_ += loss;
  if (bar_) {
    draw(done_ == total_);
    return;
  }
  // Lines: one line each time done_ crosses the next multiple of line_every * total_.
  bool report = false;
  while (opt_.line_every > 0 &&
         double(done_) >= double(next_line_) * opt_.line_every * double(total_) - 1e-6) {
    report = true;
    ++next_line_;
  }
  if (report || done_ == total_) {
    *opt_.out << status_line() << '\n' << std::flush;
    last_line_step_ = done_;
  }
}

bool EpochProgress::line_due(int64_t n) const {
  if (bar_) return false;
  return n == total_ || (opt_.line_every > 0 &&
                         double(n) >= double(next_line_) * opt_.line_every * double(total_) - 1e-6);
}

void EpochProgress::finish() {
  if (finished_) return;
  end_ = opt_.clock();
  finished_ = true;
  if (bar_) {
    draw(true);
    *opt_.out << '\n' << std::flush;
  } else if (last_line_step_ != done_) {
    *opt_.out << status_line() << '\n' << std::flush;
  }
}

std::string format_epoch_summary(const EpochSummary& s) {
  std::string line = format("epoch %lld/%lld  train loss %.4f", (long long)s.epoch,
                            (long long)s.epochs, s.train_loss);
  if (s.test_loss) line += format("  test loss %.4f", *s.test_loss);
  if (s.test_accuracy) line += format("  test acc %.2f%%", 100.0 * *s.test_accuracy);
  line += format("  %.0f samples/s  %.2f ms/step  %.1f s", s.samples_per_second, s.ms_per_step,
                 s.seconds);
  if (s.eval_seconds) line += format("  eval %.1f s", *s.eval_seconds);
  return line;
}

}  // namespace loom::train
