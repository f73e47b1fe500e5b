// Op-table cases: views, copies, cat/stack, index_select.
#include "op_table.h"

namespace loom::testing {

namespace {
using A = ref::Array;
// Reference permute of a row-major array.
A permute_ref(const A& a, const std::vector<int64_t>& dims) {
  Shape s(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) s[i] = a.shape[dims[i]];
  A o = ref::zeros(s);
  for (int64_t i = 0; i < o.numel(); ++i) {
    auto idx = ref::unravel(i, s);
    std::vector<int64_t> src(dims.size());
    for (size_t k = 0; k < dims.size(); ++k) src[dims[k]] = idx[k];
    o.v[i] = a.at(src);
  }
  return o;
}
}  // namespace

std::vector<OpCase> shape_cases() {
  std::vector<OpCase> cs;
  // Each view is followed by a multiplication with fixed weights so the gradient is not uniform.
  cs.push_back({"reshape_of_transpose",
                {{{3, 4}}},
                [](auto& x) {
                  return x[0].t().reshape({2, 6});
                },
                [](auto& r) {
                  A p = permute_ref(r[0], {1, 0});
                  p.shape = {2, 6};
                  return p;
                }});
  cs.push_back({"permute",
                {{{2, 3, 4}}},
                [](auto& x) {
                  return x[0].permute({2, 0, 1}).contiguous();
                },
                [](auto& r) {
                  return permute_ref(r[0], {2, 0, 1});
                }});
  // Same values, NHWC strides: a copy, and a view for one channel; the gradient passes through.
  cs.push_back({"to_channels_last",
                {{{2, 3, 4, 5}}},
                [](auto& x) { return to_channels_last(x[0]); },
                [](auto& r) { return r[0]; }});
  cs.push_back({"to_channels_last_one_channel",
                {{{2, 1, 3, 4}}},
                [](auto& x) { return to_channels_last(x[0]); },
                [](auto& r) { return r[0]; }});
  cs.push_back({"slice_step",
                {{{5, 6}}},
                [](auto& x) { return x[0].slice(0, 1, 5, 2).slice(1, -4, 6); },
                [](auto& r) {
                  A o = ref::zeros({2, 4});
                  for (int i = 0; i < 2; ++i)
                    for (int j = 0; j < 4; ++j) o.v[i * 4 + j] = r[0].v[(1 + 2 * i) * 6 + 2 + j];
                  return o;
                }});
  cs.push_back({"select",
                {{{3, 4}}},
                [](auto& x) { return x[0].select(1, -1); },
                [](auto& r) {
                  A o = ref::zeros({3});
                  for (int i = 0; i < 3; ++i) o.v[i] = r[0].v[i * 4 + 3];
                  return o;
                }});
  cs.push_back({"expand_unsqueeze_squeeze",
                {{{3}}},
                [](auto& x) {
                  return x[0].unsqueeze(0).expand({2, 3}).unsqueeze(2).squeeze(2) * 1.5;
                },
                [](auto& r) {
                  A o = ref::zeros({2, 3});
                  for (int i = 0; i < 6; ++i) o.v[i] = 1.5 * r[0].v[i % 3];
                  return o;
                }});
  cs.push_back({"flatten",
                {{{2, 3, 4}}},
                [](auto& x) { return x[0].flatten(1); },
                [](auto& r) {
                  A o = r[0];
                  o.shape = {2, 12};
                  return o;
                }});
  cs.push_back({"cat",
                {{{2, 3}}, {{4, 3}}, {{3, 2}}},
                [](auto& x) {
                  return cat({x[0], x[1], x[2].t()}, 0);
                },
                [](auto& r) {
                  A o = ref::zeros({8, 3});
                  for (int i = 0; i < 6; ++i) o.v[i] = r[0].v[i];
                  for (int i = 0; i < 12; ++i) o.v[6 + i] = r[1].v[i];
                  for (int i = 0; i < 2; ++i)
                    for (int j = 0; j < 3; ++j) o.v[18 + i * 3 + j] = r[2].v[j * 2 + i];
                  return o;
                }});
  cs.push_back({"stack_dim1",
                {{{2, 3}}, {{2, 3}}},
                [](auto& x) {
                  return stack({x[0], x[1]}, 1);
                },
                [](auto& r) {
                  A o = ref::zeros({2, 2, 3});
                  for (int i = 0; i < 2; ++i)
                    for (int k = 0; k < 2; ++k)
                      for (int j = 0; j < 3; ++j) o.v[(i * 2 + k) * 3 + j] = r[k].v[i * 3 + j];
                  return o;
                }});
  cs.push_back(
      {"index_select_repeats",
       {{{5, 3}}},
       [](auto& x) {
         return index_select(x[0], 0, from_vector<int64_t>({4, 0, 4, 2}, {4}).to(x[0].device()));
       },
       [](auto& r) {
         A o = ref::zeros({4, 3});
         int64_t idx[] = {4, 0, 4, 2};
         for (int i = 0; i < 4; ++i)
           for (int j = 0; j < 3; ++j) o.v[i * 3 + j] = r[0].v[idx[i] * 3 + j];
         return o;
       }});
  return cs;
}

}  // namespace loom::testing
