// FSDP with bf16 units (Note [FSDP mixed precision] in distributed/fsdp/fsdp.h) on real Gloo jobs:
// the reduced gradient is the float32 mean of the ranks' bf16 gradients (bit for bit on 2 ranks,
// within float32's rounding on 3, and holding values bf16 cannot represent), and 20 training steps
// on 2 ranks end bit for bit where the arithmetic the Note describes, written out in one process,
// ends. zero_tool.cpp's grads and mp_reference modes are the workers.
// Leaves out: mixed precision against bf16 autocast and checkpoints (test_fsdp.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "../zero/zero_jobs.h"
#include "nn/serialize.h"

using namespace loom;
using test::Job;

#ifdef LOOM_WITH_GLOO
namespace {

std::map<std::string, Tensor> by_name(const NamedTensors& v) {
  std::map<std::string, Tensor> m;
  for (const auto& [k, t] : v) m[k] = t;
  return m;
}

// A float32 value is a bf16 value when its low 16 bits (the mantissa bits bf16 drops) are zero.
bool is_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return (bits & 0xFFFFu) == 0;
}

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

}  // namespace

// Each rank computes its gradient in bf16 on its own rows; FSDP copies it into a float32 buffer,
// scales it by 1/N and reduce-scatters in float32. So the reduced gradient is:
//   2 ranks: fl32(g0 / 2 + g1 / 2), bit for bit (halving a bf16 value is exact, and one float32
//            addition of two terms rounds the same in either order);
//   3 ranks: within 4 u (sum |g_r|) / 3 of the exact mean, u = 2^-24: one rounding of 1/3, one
//            of each product g_r * fl(1/3), two additions in whatever order the ring takes.
// A reduction in bf16 (2^-9 relative) is far outside both, and its results would all be bf16
// values: most of the true float32 means are not (checked too).
TEST(FsdpGlooMixedPrecision, GradientsAreReducedInFloat32OnTwoAndThreeRanks) {
  const double u = std::ldexp(1.0, -24);
  for (int world : {2, 3}) {
    SCOPED_TRACE(testing::Message() << world << " ranks");
    Job j = test::run_zero_mode(world, {"grads"});
    std::vector<std::map<std::string, Tensor>> ranks;
    for (int r = 0; r < world; ++r)
      ranks.push_back(by_name(
          load_safetensors(j.dir + "/grads_rank" + std::to_string(r) + ".safetensors").tensors));
    int64_t elements = 0, not_bf16 = 0, wrong = 0, ranks_differ = 0;
    std::string first_wrong;
    for (const auto& [key, t0] : ranks[0]) {
      if (key.rfind("local.", 0) != 0) continue;
      const std::string name = key.substr(6);
      ASSERT_TRUE(ranks[0].count("fsdp." + name)) << name << " has no reduced gradient";
      std::vector<std::vector<float>> g;
      for (int r = 0; r < world; ++r) g.push_back(ranks[size_t(r)].at(key).to_vector<float>());
      const std::vector<float> got = ranks[0].at("fsdp." + name).to_vector<float>();
      ASSERT_EQ(got.size(), g[0].size()) << name;
      for (int r = 1; r < world; ++r)  // every rank gathered the same shards
        EXPECT_EQ(ranks[size_t(r)].at("fsdp." + name).to_vector<float>(), got) << name;
      for (size_t i = 0; i < got.size(); ++i) {
        double exact = 0, magnitude = 0;
        for (int r = 0; r < world; ++r) {
          exact += double(g[size_t(r)][i]) / world;
          magnitude += std::abs(double(g[size_t(r)][i])) / world;
        }
        ranks_differ += g[0][i] != g[1][i];
        ++elements;
        not_bf16 += !is_bf16(got[i]);
        const bool ok = world == 2 ? bits_of(got[i]) == bits_of(g[0][i] * 0.5f + g[1][i] * 0.5f)
                                   : std::abs(double(got[i]) - exact) <= 4 * u * magnitude;
        if (!ok && wrong++ == 0)
          first_wrong = str(name, "[", i, "]: reduced ", got[i], ", float32 mean ", exact,
                            " (rank gradients ", g[0][i], ", ", g[1][i], ")");
      }
    }
    EXPECT_GT(elements, 5000) << "every parameter of the GPT";
    EXPECT_GT(ranks_differ, elements / 2)
        << "the ranks' data must differ for the mean to mean much";
    EXPECT_EQ(wrong, 0) << wrong << " of " << elements
                        << " elements are not the float32 mean; the first: " << first_wrong;
    // A sum of two bf16 values of one exponent needs a ninth significant bit half of the time,
    // and more when their exponents differ: a quarter leaves room (seen: 59% on 2 ranks, 85% on 3).
    EXPECT_GT(not_bf16, elements / 4)
        << "only " << not_bf16 << " of " << elements << " reduced values are outside bf16";
    std::printf("%d ranks: %ld of %ld reduced gradient values are not bf16 values\n", world,
                long(not_bf16), long(elements));
    std::filesystem::remove_all(j.dir);
  }
}

// Note [FSDP mixed precision], as arithmetic: fp32 masters; each step every rank's gradient is that
// of the masters rounded to bf16 on its rows, and their float32 mean updates the masters through
// AdamW. zero_tool mp_reference does exactly that in one process (plain bf16 model, no FSDP, no
// collectives); on 2 ranks the sum of two terms has one rounding in any order, so FSDP's 20 steps
// must end on the same bits. Any other rounding of the gradients, the gathered weights or the
// master changes them.
TEST(FsdpGlooMixedPrecision, TwentyStepsOnTwoRanksEndOnTheWrittenOutArithmeticBitForBit) {
  Job z = test::run_zero(2, "f32", 3, 20, {"gpt=1", "mp=bf16"});
  const NamedTensors want = test::mp_reference(2, 20), init = test::mp_reference(2, 0);
  EXPECT_TRUE(test::bitwise_equal(z.final_of(0), want))
      << "max |diff| " << test::worst_diff(z.final_of(0), want);
  test::expect_ranks_agree(z, 2);
  EXPECT_GT(test::worst_diff(want, init), 1e-2) << "20 steps of AdamW at 3e-3 moved the weights";
  std::filesystem::remove_all(z.dir);
}
#endif  // LOOM_WITH_GLOO
