// The two ways the CUDA backend runs a cuDNN convolution, and what they share: the three tensors
// of one call (ConvArgs) and the direction. kernels/cuda/conv/cuda_conv.cpp holds the backend's
// entry points and chooses between them.
//   run_conv_graph (cudnn_conv_graph.cpp): cuDNN's graph API with loom's own cache of finalized
//     execution plans, autotuned on first use. The fast path.
//   run_conv_legacy (cudnn_conv_legacy.cpp): the classic cudnnConvolution* calls with
//     cudnnFind*AlgorithmEx. Kept beside it as the reference (use_naive_kernels()) and as the
//     fallback for a convolution no graph-API engine takes.
// Leaves out: fused bias/activation epilogues, 3-d convolutions, tensors of 2^31 or more elements.
#pragma once

#include <cudnn.h>

#include "core/tensor.h"
#include "kernels/params.h"

namespace loom::cuda {

enum class ConvDir : int { Forward, BackwardData, BackwardFilter };

// Which path runs a convolution. Fastest (the default): the graph API's plan, unless the classic
// API's algorithm measured faster or no graph engine takes it. GraphApi: the graph API whenever
// an engine takes it (the tests use it to check that path). ClassicApi: always the classic API;
// use_naive_kernels() selects it too.
enum class ConvPath : int { Fastest, GraphApi, ClassicApi };
void set_conv_path(ConvPath p);
ConvPath conv_path();

// "conv2d", "conv2d_backward_input" or "conv2d_backward_weight": the name errors use.
const char* conv_dir_name(ConvDir d);

// The three tensors of one convolution, whichever of them is the output:
// x: (N, C, H, W), w: (K, C/groups, R, S), y: (N, K, P, Q). The legacy path takes them contiguous
// (NCHW); the graph path also takes each in the channels-last layout (strides of NHWC / KRSC).
struct ConvArgs {
  ConvDir dir;
  Tensor x, w, y;
  Conv2dParams p;
};

cudnnDataType_t dnn_dtype(DType t);

// The tensor a direction writes: y (Forward), x (BackwardData) or w (BackwardFilter).
const Tensor& conv_output(const ConvArgs& a);

// Throws when cuDNN finds nothing for this convolution.
void run_conv_legacy(const ConvArgs& a);

// The classic API's measured time for this convolution (its cudnnFind choice, made and cached on
// first use; the output tensor is overwritten then), or -1 when a heuristic chose it during a
// capture.
float classic_conv_ms(const ConvArgs& a);

// False, with nothing written, when the classic API is to run this convolution: no graph-API
// engine takes it, or (with `fastest`) the classic API's algorithm measured faster (Note [cuDNN
// plan cache]).
bool run_conv_graph(const ConvArgs& a, bool fastest);

// How many graph-API plans with an engine this thread has cached (for tests).
size_t graph_conv_plan_count();

}  // namespace loom::cuda
