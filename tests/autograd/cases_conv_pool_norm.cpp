// Op-table cases: conv2d, pooling, batch_norm, layer_norm, each against a direct float64 loop
// written here (windows walked cell by cell, statistics summed per channel).
#include <cmath>
#include <limits>

#include "op_table.h"

namespace loom::testing {

namespace {

using A = ref::Array;

Conv2dParams conv_params(int64_t stride, int64_t pad, int64_t dil = 1, int64_t groups = 1) {
  Conv2dParams p;
  p.stride = {stride, stride};
  p.padding = {pad, pad};
  p.dilation = {dil, dil};
  p.groups = groups;
  return p;
}

Pool2dParams pool_params(int64_t k, int64_t stride, int64_t pad, bool include_pad = true) {
  Pool2dParams p;
  p.kernel = {k, k};
  p.stride = {stride, stride};
  p.padding = {pad, pad};
  p.count_include_pad = include_pad;
  return p;
}

// y[n, k, p, q] = b[k] + sum over (c, r, s) of x[n, g*Cg + c, ih, iw] w[k, c, r, s]
A conv_ref(const A& x, const A& w, const A* b, const Conv2dParams& cp) {
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t K = w.shape[0], Cg = w.shape[1], R = w.shape[2], S = w.shape[3];
  int64_t P = (H + 2 * cp.padding[0] - cp.dilation[0] * (R - 1) - 1) / cp.stride[0] + 1;
  int64_t Q = (W + 2 * cp.padding[1] - cp.dilation[1] * (S - 1) - 1) / cp.stride[1] + 1;
  int64_t Kg = K / cp.groups;
  (void)C;
  A y = ref::zeros({N, K, P, Q});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          double s = b ? b->v[k] : 0.0;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t t = 0; t < S; ++t) {
                int64_t ih = p * cp.stride[0] - cp.padding[0] + r * cp.dilation[0];
                int64_t iw = q * cp.stride[1] - cp.padding[1] + t * cp.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                s += x.at({n, (k / Kg) * Cg + c, ih, iw}) * w.at({k, c, r, t});
              }
          y.at({n, k, p, q}) = s;
        }
  return y;
}

// Max or average over each window, walking its cells one by one (padding cells count toward
// the divisor only with count_include_pad, and never win a max).
A pool_ref(const A& x, const Pool2dParams& pp, bool is_max) {
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t P = (H + 2 * pp.padding[0] - pp.kernel[0]) / pp.stride[0] + 1;
  int64_t Q = (W + 2 * pp.padding[1] - pp.kernel[1]) / pp.stride[1] + 1;
  A y = ref::zeros({N, C, P, Q});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0, count = 0;
          for (int64_t r = 0; r < pp.kernel[0]; ++r)
            for (int64_t s = 0; s < pp.kernel[1]; ++s) {
              int64_t ih = p * pp.stride[0] - pp.padding[0] + r,
                      iw = q * pp.stride[1] - pp.padding[1] + s;
              bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
              bool in_padded = ih < H + pp.padding[0] && iw < W + pp.padding[1];
              if (inside) {
                best = std::max(best, x.at({n, c, ih, iw}));
                sum += x.at({n, c, ih, iw});
              }
              if (inside || (pp.count_include_pad && in_padded)) count += 1;
            }
          y.at({n, c, p, q}) = is_max ? best : sum / count;
        }
  return y;
}

A adaptive_avg_ref(const A& x, int64_t oh, int64_t ow) {
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  A y = ref::zeros({N, C, oh, ow});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t h0 = int64_t(std::floor(double(i * H) / oh)),
                  h1 = int64_t(std::ceil(double((i + 1) * H) / oh));
          int64_t w0 = int64_t(std::floor(double(j * W) / ow)),
                  w1 = int64_t(std::ceil(double((j + 1) * W) / ow));
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += x.at({n, c, h, w});
          y.at({n, c, i, j}) = s / double((h1 - h0) * (w1 - w0));
        }
  return y;
}

// Normalises x (N, C, ...) per channel: with batch statistics, or with the given mean/var.
A batch_norm_ref(const A& x, const A* w, const A* b, const A* mean, const A* var, double eps) {
  int64_t N = x.shape[0], C = x.shape[1], L = x.numel() / (N * C);
  A y = ref::zeros(x.shape);
  for (int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0;
    if (mean) {
      m = mean->v[c], v = var->v[c];
    } else {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t l = 0; l < L; ++l) m += x.v[(n * C + c) * L + l];
      m /= double(N * L);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t l = 0; l < L; ++l) v += std::pow(x.v[(n * C + c) * L + l] - m, 2);
      v /= double(N * L);
    }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l) {
        int64_t i = (n * C + c) * L + l;
        y.v[i] = (x.v[i] - m) / std::sqrt(v + eps) * (w ? w->v[c] : 1.0) + (b ? b->v[c] : 0.0);
      }
  }
  return y;
}

// Normalises each row of `inner` trailing elements; w, b of `inner` elements.
A layer_norm_ref(const A& x, int64_t inner, const A* w, const A* b, double eps) {
  A y = ref::zeros(x.shape);
  for (int64_t r = 0; r < x.numel() / inner; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < inner; ++i) m += x.v[r * inner + i];
    m /= double(inner);
    for (int64_t i = 0; i < inner; ++i) v += std::pow(x.v[r * inner + i] - m, 2);
    v /= double(inner);
    for (int64_t i = 0; i < inner; ++i)
      y.v[r * inner + i] =
          (x.v[r * inner + i] - m) / std::sqrt(v + eps) * (w ? w->v[i] : 1.0) + (b ? b->v[i] : 0.0);
  }
  return y;
}

// (N, C, H, W) -> (N, C, W, H)
A transpose_hw(const A& x) {
  A y = ref::zeros({x.shape[0], x.shape[1], x.shape[3], x.shape[2]});
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto idx = ref::unravel(i, x.shape);
    y.at({idx[0], idx[1], idx[3], idx[2]}) = x.v[i];
  }
  return y;
}

}  // namespace

std::vector<OpCase> conv_pool_norm_cases() {
  std::vector<OpCase> cs;
  // ---- conv2d
  cs.push_back({"conv2d_pad1_bias",
                {{{2, 3, 6, 5}}, {{4, 3, 3, 3}}, {{4}}},
                [](auto& x) { return conv2d(x[0], x[1], x[2], conv_params(1, 1)); },
                [](auto& r) { return conv_ref(r[0], r[1], &r[2], conv_params(1, 1)); }});
  cs.push_back({"conv2d_stride2",
                {{{2, 2, 7, 7}}, {{3, 2, 3, 3}}},
                [](auto& x) { return conv2d(x[0], x[1], Tensor(), conv_params(2, 1)); },
                [](auto& r) { return conv_ref(r[0], r[1], nullptr, conv_params(2, 1)); }});
  cs.push_back({"conv2d_dilation2",
                {{{1, 2, 7, 8}}, {{3, 2, 3, 3}}},
                [](auto& x) { return conv2d(x[0], x[1], Tensor(), conv_params(1, 1, 2)); },
                [](auto& r) { return conv_ref(r[0], r[1], nullptr, conv_params(1, 1, 2)); }});
  cs.push_back({"conv2d_groups2_bias",
                {{{2, 4, 5, 5}}, {{6, 2, 3, 3}}, {{6}}},
                [](auto& x) { return conv2d(x[0], x[1], x[2], conv_params(1, 1, 1, 2)); },
                [](auto& r) { return conv_ref(r[0], r[1], &r[2], conv_params(1, 1, 1, 2)); }});
  cs.push_back({"conv2d_pointwise_bias",
                {{{2, 4, 3, 3}}, {{5, 4, 1, 1}}, {{5}}},
                [](auto& x) { return conv2d(x[0], x[1], x[2]); },
                [](auto& r) { return conv_ref(r[0], r[1], &r[2], {}); }});
  // A transposed (non-contiguous) input and a weight read through a transposed view.
  cs.push_back(
      {"conv2d_strided_views",
       {{{2, 3, 6, 5}}, {{4, 3, 2, 3}}},
       [](auto& x) {
         return conv2d(x[0].transpose(2, 3), x[1].transpose(2, 3), Tensor(), conv_params(1, 1));
       },
       [](auto& r) {
         return conv_ref(transpose_hw(r[0]), transpose_hw(r[1]), nullptr, conv_params(1, 1));
       }});
  // ---- pooling
  cs.push_back({"max_pool2d_k2s2",
                {{{2, 3, 6, 6}}},
                [](auto& x) { return max_pool2d(x[0], pool_params(2, 2, 0)); },
                [](auto& r) { return pool_ref(r[0], pool_params(2, 2, 0), true); }});
  cs.push_back({"max_pool2d_k3s2p1",
                {{{2, 2, 7, 6}}},
                [](auto& x) { return max_pool2d(x[0], pool_params(3, 2, 1)); },
                [](auto& r) { return pool_ref(r[0], pool_params(3, 2, 1), true); }});
  cs.push_back({"max_pool2d_unbatched",
                {{{2, 5, 5}}},
                [](auto& x) { return max_pool2d(x[0], pool_params(2, 1, 0)); },
                [](auto& r) {
                  A x4{{1, 2, 5, 5}, r[0].v};
                  A y = pool_ref(x4, pool_params(2, 1, 0), true);
                  return A{{2, 4, 4}, y.v};
                }});
  cs.push_back({"avg_pool2d_count_include_pad",
                {{{2, 2, 6, 5}}},
                [](auto& x) { return avg_pool2d(x[0], pool_params(3, 2, 1, true)); },
                [](auto& r) { return pool_ref(r[0], pool_params(3, 2, 1, true), false); }});
  cs.push_back({"avg_pool2d_exclude_pad",
                {{{2, 2, 6, 5}}},
                [](auto& x) { return avg_pool2d(x[0], pool_params(3, 2, 1, false)); },
                [](auto& r) { return pool_ref(r[0], pool_params(3, 2, 1, false), false); }});
  cs.push_back({"avg_pool2d_k2s2_transposed",
                {{{2, 3, 4, 6}}},
                [](auto& x) { return avg_pool2d(x[0].transpose(2, 3), pool_params(2, 2, 0)); },
                [](auto& r) { return pool_ref(transpose_hw(r[0]), pool_params(2, 2, 0), false); }});
  cs.push_back({"adaptive_avg_pool2d_1x1",
                {{{2, 3, 5, 4}}},
                [](auto& x) {
                  return adaptive_avg_pool2d(x[0], {1, 1});
                },
                [](auto& r) { return adaptive_avg_ref(r[0], 1, 1); }});
  cs.push_back({"adaptive_avg_pool2d_divisible",
                {{{2, 2, 6, 4}}},
                [](auto& x) {
                  return adaptive_avg_pool2d(x[0], {3, 2});
                },
                [](auto& r) { return adaptive_avg_ref(r[0], 3, 2); }});
  cs.push_back({"adaptive_avg_pool2d_3x2_from_7x5",
                {{{2, 2, 7, 5}}},
                [](auto& x) {
                  return adaptive_avg_pool2d(x[0], {3, 2});
                },
                [](auto& r) { return adaptive_avg_ref(r[0], 3, 2); }});
  // ---- batch_norm: running stats made inside the op (the training call updates them)
  cs.push_back(
      {"batch_norm_train",
       {{{4, 3, 2, 2}}, {{3}}, {{3}}},
       [](auto& x) {
         Tensor rm = zeros({3}, {.dtype = x[0].dtype(), .device = x[0].device()}),
                rv = ones({3}, {.dtype = x[0].dtype(), .device = x[0].device()});
         return batch_norm(x[0], x[1], x[2], rm, rv, true, 0.1, 1e-5);
       },
       [](auto& r) { return batch_norm_ref(r[0], &r[1], &r[2], nullptr, nullptr, 1e-5); }});
  cs.push_back(
      {"batch_norm_train_2d_no_affine",
       {{{6, 4}}},
       [](auto& x) { return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
       [](auto& r) { return batch_norm_ref(r[0], nullptr, nullptr, nullptr, nullptr, 1e-5); }});
  cs.push_back(
      {"batch_norm_eval",
       {{{3, 3, 2, 2}}, {{3}}, {{3}}, {{3}, Init::Normal, false}, {{3}, Init::Positive, false}},
       [](auto& x) { return batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1, 1e-5); },
       [](auto& r) { return batch_norm_ref(r[0], &r[1], &r[2], &r[3], &r[4], 1e-5); }});
  // The fused ReLU (batch_norm(..., relu = true)), in training and in eval.
  auto relu_of = [](A y) {
    for (double& v : y.v) v = v > 0 ? v : 0.0;
    return y;
  };
  cs.push_back({"batch_norm_train_relu",
                {{{4, 3, 2, 2}}, {{3}}, {{3}}},
                [](auto& x) {
                  return batch_norm(x[0], x[1], x[2], Tensor(), Tensor(), true, 0.1, 1e-5, true);
                },
                [relu_of](auto& r) {
                  return relu_of(batch_norm_ref(r[0], &r[1], &r[2], nullptr, nullptr, 1e-5));
                }});
  cs.push_back(
      {"batch_norm_eval_relu",
       {{{3, 3, 2, 2}}, {{3}}, {{3}}, {{3}, Init::Normal, false}, {{3}, Init::Positive, false}},
       [](auto& x) { return batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1, 1e-5, true); },
       [relu_of](auto& r) {
         return relu_of(batch_norm_ref(r[0], &r[1], &r[2], &r[3], &r[4], 1e-5));
       }});
  // A residual block's end, relu(batch_norm(x) + residual), as one op (training), and its
  // composite (eval).
  auto plus = [](A y, const A& r) {
    for (size_t i = 0; i < y.v.size(); ++i) y.v[i] += r.v[i];
    return y;
  };
  cs.push_back({"batch_norm_add_relu",
                {{{4, 3, 2, 2}}, {{3}}, {{3}}, {{4, 3, 2, 2}}},
                [](auto& x) {
                  return batch_norm_add_relu(x[0], x[3], x[1], x[2], Tensor(), Tensor(), true);
                },
                [relu_of, plus](auto& r) {
                  return relu_of(
                      plus(batch_norm_ref(r[0], &r[1], &r[2], nullptr, nullptr, 1e-5), r[3]));
                }});
  cs.push_back(
      {"batch_norm_add_relu_eval",
       {{{3, 3, 2, 2}},
        {{3}},
        {{3}},
        {{3, 3, 2, 2}},
        {{3}, Init::Normal, false},
        {{3}, Init::Positive, false}},
       [](auto& x) { return batch_norm_add_relu(x[0], x[3], x[1], x[2], x[4], x[5], false); },
       [relu_of, plus](auto& r) {
         return relu_of(plus(batch_norm_ref(r[0], &r[1], &r[2], &r[4], &r[5], 1e-5), r[3]));
       }});
  // ---- layer_norm
  cs.push_back({"layer_norm_affine",
                {{{3, 4, 5}}, {{5}}, {{5}}},
                [](auto& x) { return layer_norm(x[0], {5}, x[1], x[2]); },
                [](auto& r) { return layer_norm_ref(r[0], 5, &r[1], &r[2], 1e-5); }});
  cs.push_back({"layer_norm_2d_no_affine",
                {{{2, 3, 4}}},
                [](auto& x) {
                  return layer_norm(x[0], {3, 4});
                },
                [](auto& r) { return layer_norm_ref(r[0], 12, nullptr, nullptr, 1e-5); }});
  return cs;
}

}  // namespace loom::testing
