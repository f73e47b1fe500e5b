// Op-table cases: conv2d, pooling, batch_norm, layer_norm. (To be written.)
#include "op_table.h"

namespace loom::testing {

std::vector<OpCase> conv_pool_norm_cases() { return {}; }

}  // namespace loom::testing
