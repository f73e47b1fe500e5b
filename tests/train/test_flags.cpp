// The training programs' flags (add_train_flags and its ranges in train/flags.h): ranges
// named in readable form, non-finite numbers refused, --help with defaults, a bad flag answered
// with the usage line and exit code 2. Leaves out: what the flags do (the trainer tests).
#include <gtest/gtest.h>

#include <vector>

#include "train/flags.h"
#include "train/run_log.h"

using namespace loom;

namespace {

// Parses args (after the program name) with the training flags; returns CLI11's error message,
// or "" when they parse.
std::string parse_error(std::vector<std::string> args) {
  CLI::App app{"test"};
  train::TrainConfig cfg;
  train::add_train_flags(app, cfg);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them reversed
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

void expect_refused(std::vector<std::string> args, std::initializer_list<std::string> parts) {
  std::string msg = parse_error(args);
  ASSERT_FALSE(msg.empty()) << args[0] << " " << args[1] << " was accepted";
  for (const auto& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  EXPECT_LT(msg.size(), 200u) << "not a readable message: " << msg;  // no 309-digit bounds
}

}  // namespace

TEST(Flags, NumbersOutOfRangeNameTheFlagTheValueAndTheRange) {
  expect_refused({"--epochs", "0"}, {"--epochs", "[1, 1000000]", "'0'"});
  expect_refused({"--batch-size", "-5"}, {"--batch-size", "-5"});
  expect_refused({"--epochs", "99999999999999999999999"}, {"--epochs", "[1, 1000000]"});
  expect_refused({"--lr", "0"}, {"--lr", "(0, 1000]", "'0'"});
  expect_refused({"--lr", "-1e-3"}, {"--lr", "-1e-3"});
  expect_refused({"--label-smoothing", "1.5"}, {"--label-smoothing", "[0, 0.99]"});
  expect_refused({"--grad-accum", "0"}, {"--grad-accum", "[1, 1048576]", "'0'"});
  expect_refused({"--epochs", "2x"}, {"--epochs", "'2x'"});
  EXPECT_EQ(parse_error({"--epochs", "3", "--lr", "0.01", "--workers", "1"}), "");
}

TEST(Flags, NonFiniteNumbersAreRefused) {
  for (const char* v : {"nan", "inf", "-inf", "NaN", "infinity", "1e999"})
    expect_refused({"--lr", v}, {"--lr", "finite", v});
  expect_refused({"--weight-decay", "nan"}, {"--weight-decay", "finite"});
}

TEST(Flags, ResourceFlagsAreCheckedAgainstTheMachine) {
  expect_refused({"--workers", "100000"},
                 {"--workers", "100000", std::to_string(train::max_workers())});
  EXPECT_EQ(parse_error({"--workers", std::to_string(train::max_workers())}), "");
}

TEST(Flags, HelpShowsDefaultsAndABadFlagPrintsUsage) {
  CLI::App app{"test"};
  train::TrainConfig cfg;
  train::add_train_flags(app, cfg);
  std::string help = app.help();
  EXPECT_NE(help.find("128"), std::string::npos) << help;    // --batch-size default
  EXPECT_NE(help.find("0.001"), std::string::npos) << help;  // --lr default
  EXPECT_NE(help.find("adam"), std::string::npos) << help;

  char prog[] = "train_test", bad[] = "--no-such-flag";
  char* argv[] = {prog, bad};
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  int rc = train::parse_flags(app, 2, argv);
  std::string out = testing::internal::GetCapturedStdout() + testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("--no-such-flag"), std::string::npos) << out;
  EXPECT_NE(out.find("Usage:"), std::string::npos) << out;
}

TEST(Flags, RunMainTurnsAnyExceptionIntoOneLineAndExitCode1) {
  testing::internal::CaptureStderr();
  int a = train::run_main("prog", []() -> int { throw Error("boom: loom error"); });
  int b = train::run_main("prog", []() -> int { throw std::out_of_range("stoi"); });
  int c = train::run_main("prog", []() -> int { throw std::bad_alloc(); });
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(c, 1);
  EXPECT_NE(err.find("prog: error: boom: loom error\n"), std::string::npos) << err;
  EXPECT_NE(err.find("prog: error: stoi\n"), std::string::npos) << err;
  EXPECT_NE(err.find("prog: error: out of host memory\n"), std::string::npos) << err;
}
