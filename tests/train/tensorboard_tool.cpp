// tensorboard_tool: the C++ half of tests/train/read_tensorboard.py.
//   tensorboard_tool write <log_dir>   writes the known scalars below and prints the file's path
// Keep the series in step with the Python script.
#include <cmath>
#include <iostream>

#include "core/error.h"
#include "train/tensorboard.h"

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) != "write") {
    std::cerr << "usage: tensorboard_tool write <log_dir>\n";
    return 64;
  }
  try {
    loom::train::SummaryWriter w(argv[2]);
    for (int step = 0; step < 10; ++step)
      w.add_scalar("train/loss", 1.0 / (step + 1), step, 1700000000.5 + step);
    for (int epoch = 1; epoch <= 3; ++epoch)
      w.add_scalar("test/accuracy", 0.8 + 0.05 * epoch, epoch);
    w.add_scalar("lr", 1e-3, 0);
    w.add_scalar("lr", 5e-4, int64_t(1) << 40);  // a step that needs a 6-byte varint
    w.add_scalar("throughput/samples_per_sec", 12345.0, 7);
    w.flush();
    std::cout << w.path() << "\n";
  } catch (const loom::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
