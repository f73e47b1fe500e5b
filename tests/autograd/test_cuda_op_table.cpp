// Every case of the per-op table (tests/autograd/op_table.h) run on the GPU in float32, float16
// and bfloat16, forward and backward, against the same op on the CPU in float64 on the same
// (rounded) inputs. New cases added to the table are covered here without further work.
#include <functional>
#include <string>

#include "op_table.h"
#include "support/cuda_test_util.h"

namespace loom::testing {
namespace {

std::vector<OpCase> all_cases() {
  std::vector<OpCase> all;
  for (auto* family :
       {&elementwise_cases, &reduce_cases, &linalg_cases, &shape_cases, &softmax_loss_cases,
        &conv_pool_norm_cases, &embedding_attention_cases, &llama_cases}) {
    auto cs = (*family)();
    all.insert(all.end(), cs.begin(), cs.end());
  }
  return all;
}

struct Inputs {
  std::vector<Tensor> cpu,
      gpu;  // cpu: float64 copies of the rounded values; gpu: dtype d on cuda:0
};

// The inputs of a case in float64, drawn as the op-table runner draws them, rounded to `d`.
Inputs make_pair_inputs(const OpCase& c, DType d, bool grad) {
  Generator gen(std::hash<std::string>{}(c.name));
  Inputs in;
  for (const InputSpec& s : c.inputs) {
    Tensor t;
    if (s.init == Init::Int) {
      t = randint(0, s.int_high, s.shape, {.dtype = DType::I64}, &gen);
      in.cpu.push_back(t);
      in.gpu.push_back(t.to(cuda_device(0)));
      continue;
    }
    t = s.init == Init::Positive ? uniform(s.shape, 0.5, 2.0, {.dtype = DType::F64}, &gen)
                                 : randn(s.shape, {.dtype = DType::F64}, &gen);
    Tensor r = t.to(d);
    Tensor cpu = r.to(DType::F64), gpu = r.to(cuda_device(0));
    if (grad && s.grad) {
      cpu.requires_grad_(true);
      gpu.requires_grad_(true);
    }
    in.cpu.push_back(cpu);
    in.gpu.push_back(gpu);
  }
  return in;
}

// Runs the op on the GPU inputs. A case whose op builds CPU tensors itself (an index or a
// target from from_vector) cannot run on the GPU as written: that is reported as a skip.
bool run_gpu(const OpCase& c, const std::vector<Tensor>& xs, Tensor& out, std::string& why) {
  try {
    out = c.op(xs);
    return true;
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.find("on cpu") == std::string::npos) throw;
    why =
        "the case makes CPU tensors inside its op (create them on x[0].device() to run it on the "
        "GPU): " +
        m;
    return false;
  }
}

const DType kGpuDtypes[] = {DType::F32, DType::F16, DType::BF16};

class CudaOpTable : public ::testing::TestWithParam<OpCase> {};

TEST_P(CudaOpTable, ForwardMatchesCpuFloat64) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const OpCase& c = GetParam();
  for (DType d : kGpuDtypes) {
    SCOPED_TRACE(std::string(c.name) + " in " + dtype_name(d));
    Inputs in = make_pair_inputs(c, d, false);
    Tensor want = c.op(in.cpu);
    Tensor got;
    std::string why;
    if (!run_gpu(c, in.gpu, got, why)) GTEST_SKIP() << why;
    EXPECT_TRUE(got.device().is_cuda()) << describe(got);
    if (want.is_floating_point()) {
      EXPECT_EQ(got.dtype(), d) << describe(got);
    } else {
      EXPECT_EQ(got.dtype(), want.dtype()) << describe(got);
    }
    double tol =
        want.is_floating_point() ? std::max(forward_tol(d), d == DType::F32 ? c.tol32 : 0.0) : 0.0;
    EXPECT_TRUE(all_close(want, got, tol));
  }
}

TEST_P(CudaOpTable, BackwardMatchesCpuFloat64) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const OpCase& c = GetParam();
  if (!c.check_grad) GTEST_SKIP() << c.name << " is not differentiable";
  for (DType d : kGpuDtypes) {
    SCOPED_TRACE(std::string(c.name) + " in " + dtype_name(d));
    Inputs in = make_pair_inputs(c, d, true);
    Tensor out_cpu = c.op(in.cpu);
    Tensor out_gpu;
    std::string why;
    if (!run_gpu(c, in.gpu, out_gpu, why)) GTEST_SKIP() << why;
    // A fixed random weighting of the outputs, so that every output element's gradient matters.
    Generator gen(7);
    Tensor w = randn(out_cpu.shape(), {.dtype = DType::F64}, &gen).to(d);
    (out_cpu * w.to(DType::F64)).sum().backward();
    (out_gpu * w.to(cuda_device(0))).sum().backward();
    for (size_t i = 0; i < in.cpu.size(); ++i) {
      if (!in.cpu[i].requires_grad()) continue;
      SCOPED_TRACE("gradient of input " + std::to_string(i));
      Tensor gc = in.cpu[i].grad(), gg = in.gpu[i].grad();
      ASSERT_EQ(gc.defined(), gg.defined());
      if (!gc.defined()) continue;
      EXPECT_TRUE(gg.device().is_cuda()) << describe(gg);
      EXPECT_TRUE(all_close(gc, gg, backward_tol(d)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaOpTable, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace loom::testing
