// cuBLASLt matmuls with a plan cache (see lt_matmul.h).
// Leaves out: autotuning among several heuristic results (cuBLASLt's first choice is used, as
// PyTorch does); integer products; FP8 outputs (FP8 inputs only, Note [FP8 products]).
#include "kernels/cuda/matmul/lt_matmul.h"

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/allocator.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "kernels/cuda/blas_handle.h"
#include "kernels/cuda/library_check.h"
#include "kernels/cuda/library_dtypes.h"
#include "kernels/cuda/math_mode.h"
#include "kernels/cuda/plan_key.h"

namespace loom::cuda {

namespace {

// Note [Lt plan cache]
// Creating descriptors is cheap, but cublasLtMatmulAlgoGetHeuristic costs tens of microseconds,
// as much as a small product itself. A plan holds the descriptors and the chosen algorithm for
// one key: every argument that can change the choice (device, dtype, math mode, shapes, leading
// dimensions, batch strides, epilogue, accumulation, and the alignment of each pointer, since the
// fastest kernels need 16-byte or better alignment). Pointers themselves are not in the key: A, B
// and D are passed per call, and the bias and aux pointers are set on the plan's descriptor under
// its mutex just before the launch (cuBLASLt reads descriptors on the host during cublasLtMatmul
// only).

constexpr int kKeyLen = 31;
using PlanKey = PlanKeyOf<kKeyLen>;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  std::string unsupported;  // why cuBLASLt has no algorithm for the key; empty when it has one
  std::mutex mu;            // guards the bias and aux pointer attributes from set to launch

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

struct PlanCache {
  std::mutex mu;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
};

PlanCache& plan_cache() {
  static PlanCache* cache = new PlanCache();  // never destroyed: plans may be used until exit
  return *cache;
}

cudaDataType_t lt_dtype(DType t) { return library_types(t, "matmul on CUDA").cuda; }

cudaDataType_t lt_fp8_dtype(Fp8Format f) {
  return f == Fp8Format::E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::None:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case LtEpilogue::Relu:
      return CUBLASLT_EPILOGUE_RELU;
    case LtEpilogue::GeluTanh:
      return CUBLASLT_EPILOGUE_GELU;
    case LtEpilogue::Bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::ReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case LtEpilogue::GeluTanhBias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case LtEpilogue::GeluTanhAux:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case LtEpilogue::GeluTanhAuxBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LtEpilogue::DGeluTanh:
      return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool has_bias(LtEpilogue e) {
  return e == LtEpilogue::Bias || e == LtEpilogue::ReluBias || e == LtEpilogue::GeluTanhBias ||
         e == LtEpilogue::GeluTanhAuxBias;
}

bool has_aux(LtEpilogue e) {
  return e == LtEpilogue::GeluTanhAux || e == LtEpilogue::GeluTanhAuxBias ||
         e == LtEpilogue::DGeluTanh;
}

// The bias, aux and FP8 scale pointers of this call on the plan's descriptor (under the plan's
// mutex).
void set_pointers(cublasLtMatmulDesc_t op, const LtMatmulArgs& x) {
  if (x.fp8) {
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                     &x.fp8->a_scale, sizeof(x.fp8->a_scale)));
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                     &x.fp8->b_scale, sizeof(x.fp8->b_scale)));
  }
  if (has_bias(x.epilogue))
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x.bias,
                                                     sizeof(x.bias)));
  if (has_aux(x.epilogue))
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                     &x.aux, sizeof(x.aux)));
}

// The largest power of two (up to 256, cuBLASLt's default assumption) dividing the address.
uint32_t alignment_of(const void* p) {
  auto addr = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && addr % a != 0) a /= 2;
  return a;
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t batch_stride) {
  cublasLtMatrixLayout_t l = nullptr;
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    int32_t count = int32_t(batch);
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                       &count, sizeof(count)));
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride, sizeof(batch_stride)));
  }
  return l;
}

std::unique_ptr<Plan> make_plan(const LtMatmulArgs& x, bool tf32) {
  auto plan = std::make_unique<Plan>();
  cudaDataType_t type = lt_dtype(x.dtype);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  if (x.dtype == DType::F64) {
    compute = CUBLAS_COMPUTE_64F;
    scale = CUDA_R_64F;
  } else if (x.dtype == DType::F32 && tf32) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, compute, scale));
  cublasOperation_t ta = x.a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = x.b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  LOOM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LOOM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtEpilogue_t epi = lt_epilogue(x.epilogue);
  LOOM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (x.fp8) {
    int8_t fast = x.fp8->fast_accum ? 1 : 0;
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                                     &fast, sizeof(fast)));
  }
  // The heuristic reads the bias and aux pointers' alignment; their types default to D's.
  set_pointers(plan->op, x);
  if (has_aux(x.epilogue))
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                     &x.ld_aux, sizeof(x.ld_aux)));
  const cudaDataType_t type_a = x.fp8 ? lt_fp8_dtype(x.fp8->a) : type;
  const cudaDataType_t type_b = x.fp8 ? lt_fp8_dtype(x.fp8->b) : type;
  plan->a = make_layout(type_a, x.a.rows, x.a.cols, x.a.ld, x.batch, x.a.batch_stride);
  plan->b = make_layout(type_b, x.b.rows, x.b.cols, x.b.ld, x.batch, x.b.batch_stride);
  plan->d = make_layout(lt_dtype(x.d_dtype.value_or(x.dtype)), x.m, x.n, x.ldd, x.batch,
                        x.batch_stride_d);

  cublasLtMatmulPreference_t pref = nullptr;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t max_ws = kLtMaxWorkspaceBytes;
  uint32_t al_a = alignment_of(x.a.ptr), al_b = alignment_of(x.b.ptr), al_d = alignment_of(x.d);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const uint32_t*> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d}};
  for (const auto& [attr, bytes] : alignments)
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, attr, bytes, sizeof(*bytes));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt_handle(x.device), plan->op, plan->a, plan->b, plan->d,
                                        plan->d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    plan->unsupported = str(
        "matmul on CUDA: cuBLASLt found no algorithm for ",
        x.fp8 ? str(fp8_name(x.fp8->a), " x ", fp8_name(x.fp8->b), " -> ") : std::string(),
        dtype_name(x.dtype), " m=", x.m, " n=", x.n, " k=", x.k, " batch=", x.batch, " (opA ",
        x.a.transpose ? "T" : "N", ", opB ", x.b.transpose ? "T" : "N", ", lda ", x.a.ld, ", ldb ",
        x.b.ld, ", ldd ", x.ldd, ", epilogue ", int(x.epilogue), "): ", cublasGetStatusName(st));
    return plan;
  }
  plan->algo = result.algo;
  plan->workspace = result.workspaceSize;
  return plan;
}

PlanKey key_of(const LtMatmulArgs& x, bool tf32) {
  const void* bias = has_bias(x.epilogue) ? x.bias : nullptr;
  return PlanKey{x.device,
                 int64_t(x.dtype),
                 int64_t(x.d_dtype.value_or(x.dtype)),
                 tf32,
                 x.m,
                 x.n,
                 x.k,
                 x.batch,
                 x.a.transpose,
                 x.a.rows,
                 x.a.cols,
                 x.a.ld,
                 x.batch > 1 ? x.a.batch_stride : 0,
                 x.b.transpose,
                 x.b.rows,
                 x.b.cols,
                 x.b.ld,
                 x.batch > 1 ? x.b.batch_stride : 0,
                 x.ldd,
                 x.batch > 1 ? x.batch_stride_d : 0,
                 int64_t(x.epilogue),
                 alignment_of(x.a.ptr),
                 alignment_of(x.b.ptr),
                 alignment_of(x.d),
                 bias ? alignment_of(bias) : 0,
                 has_aux(x.epilogue) ? alignment_of(x.aux) : 0,
                 has_aux(x.epilogue) ? x.ld_aux : 0,
                 x.accumulate,
                 x.fp8 ? int64_t(x.fp8->a) : -1,
                 x.fp8 ? int64_t(x.fp8->b) : -1,
                 x.fp8 && x.fp8->fast_accum};
}

// The cached plan for x (made at the first call with its key); plan->unsupported says whether
// cuBLASLt has an algorithm.
Plan& plan_for(const LtMatmulArgs& x, bool tf32) {
  LOOM_CHECK(x.m > 0 && x.n > 0 && x.k > 0 && x.batch > 0, "lt_matmul: empty product m=", x.m,
             " n=", x.n, " k=", x.k, " batch=", x.batch, " (callers handle empty shapes)");
  LOOM_CHECK(!has_bias(x.epilogue) || x.bias != nullptr, "lt_matmul: a bias epilogue needs a bias");
  LOOM_CHECK(!has_aux(x.epilogue) ||
                 (x.aux != nullptr && x.ld_aux >= x.m && x.ld_aux % 8 == 0 && x.batch == 1),
             "lt_matmul: an aux epilogue needs an aux matrix with a leading dimension >= m = ", x.m,
             " and a multiple of 8 (and batch 1), got ", x.ld_aux, " (batch ", x.batch, ")");
  PlanKey key = key_of(x, tf32);
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) it = cache.plans.emplace(key, make_plan(x, tf32)).first;
  return *it->second;
}

void launch(Plan& plan, const LtMatmulArgs& x) {
  // Workspace from the caching allocator: stream-ordered, so it is safe to free right after the
  // launch (the next user on this stream runs after the product).
  DataPtr workspace;
  if (plan.workspace > 0)
    workspace = allocator_for(Device(DeviceType::CUDA, x.device)).allocate(plan.workspace);

  float alpha_f = 1.0f, beta_f = x.accumulate ? 1.0f : 0.0f;
  double alpha_d = 1.0, beta_d = x.accumulate ? 1.0 : 0.0;
  const void* alpha = x.dtype == DType::F64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = x.dtype == DType::F64 ? static_cast<const void*>(&beta_d) : &beta_f;
  cudaStream_t stream = current_stream(x.device);

  std::unique_lock<std::mutex> pointer_lock(plan.mu, std::defer_lock);
  if (has_bias(x.epilogue) || has_aux(x.epilogue) || x.fp8) {
    pointer_lock.lock();
    set_pointers(plan.op, x);
  }
  LOOM_CUBLAS_CHECK(cublasLtMatmul(lt_handle(x.device), plan.op, alpha, x.a.ptr, plan.a, x.b.ptr,
                                   plan.b, beta, x.d, plan.d, x.d, plan.d, &plan.algo,
                                   workspace.get(), plan.workspace, stream));
}

// Launches the product, or returns why cuBLASLt has no algorithm for it (empty when launched).
const std::string& launch_if_supported(const LtMatmulArgs& x) {
  const bool tf32 = x.dtype == DType::F32 && allow_tf32() && !x.fp8;
  DeviceGuard guard(x.device);
  Plan& plan = plan_for(x, tf32);
  if (plan.unsupported.empty()) launch(plan, x);
  return plan.unsupported;  // plans live until exit
}

}  // namespace

void lt_matmul(const LtMatmulArgs& x) {
  const std::string& why = launch_if_supported(x);
  LOOM_CHECK(why.empty(), why);
}

bool lt_matmul_if_supported(const LtMatmulArgs& x) { return launch_if_supported(x).empty(); }

size_t lt_plan_cache_size() {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.plans.size();
}

}  // namespace loom::cuda
