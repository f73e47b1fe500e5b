// Flag checking for programs built on loom (CLI11), used by the examples and benchmarks: numeric
// ranges with readable bounds, non-finite numbers refused, defaults shown by --help, and a bad flag
// answered with the message, the usage line and exit code 2. Leaves out: the flags themselves (each
// program's own).
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>

namespace loom::train {

// Accepts an integer in [lo, hi]; refuses anything else with "expected an integer in [lo, hi],
// got <value>". CLI11 puts the flag's name in front.
inline CLI::Validator int_range(int64_t lo, int64_t hi) {
  std::ostringstream desc;
  desc << "[" << lo << ", " << hi << "]";
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        int64_t v = 0;
        size_t used = 0;
        try {
          v = std::stoll(s, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != s.size() || v < lo || v > hi)
          return "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                 "], got '" + s + "'";
        return {};
      },
      desc.str());
}

// Accepts a finite number in [lo, hi] (or (lo, hi] with open_lo): never nan or inf.
inline CLI::Validator real_range(double lo, double hi, bool open_lo = false) {
  std::ostringstream desc;
  desc << (open_lo ? "(" : "[") << lo << ", " << hi << "]";
  std::string range = desc.str();
  return CLI::Validator(
      [lo, hi, open_lo, range](std::string& s) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(s, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != s.size() || !std::isfinite(v))
          return "expected a finite number in " + range + ", got '" + s + "'";
        if (v > hi || v < lo || (open_lo && v == lo))
          return "expected a number in " + range + ", got '" + s + "'";
        return {};
      },
      range);
}

// The most data-loading threads worth starting: 4 per hardware thread (more only add switching).
inline int64_t max_workers() {
  unsigned hw = std::thread::hardware_concurrency();
  return 4 * int64_t(hw == 0 ? 1 : hw);
}

// Call before adding options: --help then shows every default.
inline void configure_app(CLI::App& app) {
  app.option_defaults()->always_capture_default();
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    std::string help = a->help(), usage;
    std::istringstream lines(help);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("Usage:", 0) == 0) usage = line;
    return std::string(e.what()) + "\n" + usage +
           "\nRun with --help for every flag and its default.\n";
  });
}

// Parses the flags. Returns -1 to go on, else the exit code (0 after --help, 2 after a bad flag,
// with the message and the usage line on stderr).
inline int parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return -1;
}

}  // namespace loom::train
