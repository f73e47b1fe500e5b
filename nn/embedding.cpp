// Embedding: a (num_embeddings, embedding_dim) table looked up by int64 ids through
// loom::embedding (autograd/ops/embedding.h), initialised N(0, 1) as PyTorch.
// Leaves out: padding_idx, max_norm and sparse gradients.
#include "autograd/ops/embedding.h"

#include "autograd/ops/factory.h"
#include "nn/init.h"
#include "nn/layers.h"

namespace loom::nn {

Embedding::Embedding(int64_t n, int64_t dim)
    : Module("Embedding"), num_embeddings(n), embedding_dim(dim) {
  LOOM_CHECK(n > 0 && dim > 0, "Embedding: num_embeddings (", n, ") and embedding_dim (", dim,
             ") must be positive");
  weight = init::new_parameter({n, dim});
  register_parameter("weight", weight);
  reset_parameters();
}

Embedding::Embedding(std::string type_name, Tensor w)
    : Module(std::move(type_name)),
      num_embeddings(w.dim() == 2 ? w.size(0) : 0),
      embedding_dim(w.dim() == 2 ? w.size(1) : 0) {
  LOOM_CHECK(w.dim() == 2, this->type_name(), ": the table ", describe(w), " must be 2-d");
  weight = std::move(w);
  register_parameter("weight", weight);
}

void Embedding::reset_parameters() { init::normal_(weight, 0.0, 1.0); }

Tensor Embedding::forward(const Tensor& ids) { return embedding(weight, ids); }

std::string Embedding::extra_repr() const { return str(num_embeddings, ", ", embedding_dim); }

}  // namespace loom::nn
