// The reference models of docs/workloads.md, shared by the example programs and the
// benchmarks so both train exactly the same networks.
// Leaves out: anything beyond MLP/CNN classifiers for 1x28x28 images.
#pragma once

#include <memory>

#include "nn/layers.h"

namespace loom::nn {

// mlp: Flatten, Linear(784, 1024), ReLU, Linear(1024, 1024), ReLU, Linear(1024, 10).
std::shared_ptr<Sequential> make_mlp(int64_t hidden = 1024, int64_t classes = 10);

// cnn: [Conv2d(1,32,3,pad 1,no bias), BatchNorm2d, ReLU], [Conv2d(32,64,3,pad 1,no bias),
// BatchNorm2d, ReLU], MaxPool2d(2), [Conv2d(64,128,3,pad 1,no bias), BatchNorm2d, ReLU],
// MaxPool2d(2), AdaptiveAvgPool2d(1), Flatten, Linear(128, 10).
std::shared_ptr<Sequential> make_cnn(int64_t classes = 10);

// wide: Flatten, Linear(784, 4096), ReLU, 7 x [Linear(4096, 4096), ReLU], Linear(4096, 10).
std::shared_ptr<Sequential> make_wide(int64_t classes = 10);

}  // namespace loom::nn
