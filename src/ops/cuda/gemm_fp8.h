// FP8 GEMMs through cuBLASLt (the FP8 recipe's, ops/fp8_recipe.h): E4M3 operands, fp32
// accumulation (no fast accumulation), the two operands' inverse scales applied by cuBLASLt
// (one scalar each, or, rowwise, one per row: CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F),
// bf16 or fp32 output, optional bf16 bias epilogue, beta = 1 to accumulate into the output.
//
// Row-major, as every tensor in anvil, and TN only, as Hopper's FP8 tensor cores take them:
//   out (M, N) [row stride ldo] = (p_inv * P (M, K)) . (q_inv * Q (N, K))^T (+ bias (N)) + beta * out
// with both P and Q stored K-contiguous (the casts of fp8_cast.h transpose where needed).
// Plans are cached per shape, like gemm.h's; it has its own handle and workspace.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "ops/workspace.h"

namespace anvil::cuda {

struct Fp8Operand {
  const void* ptr = nullptr;         // (rows, K) E4M3, row-major
  const float* inv_scale = nullptr;  // device: rows of them (rowwise) or one
};

class Fp8Gemm {
 public:
  static constexpr size_t kWorkspaceBytes = kFp8GemmWorkspaceBytes;  // the workspace table's (ops/workspace.h)

  // fast_accum: cuBLASLt's FP8 fast accumulation (the products summed in the tensor cores'
  // narrower accumulator throughout, never promoted to fp32): off in training (the recipe's
  // fp32 accumulation); on only for anvil_bench_ops' comparison.
  // workspace: kWorkspaceBytes of device memory, the caller's, for the Fp8Gemm's lifetime.
  Fp8Gemm(cudaStream_t stream, void* workspace, bool fast_accum = false);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // out_type CUDA_R_16BF or CUDA_R_32F; bias bf16 (N) or null (bf16 output only).
  void run(void* out, cudaDataType_t out_type, int64_t ldo, Fp8Operand p, Fp8Operand q, int64_t m, int64_t n, int64_t k,
           float beta, const void* bias, bool rowwise);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // m, n, k, ldo, out type, bias, beta == 0, rowwise, the output's alignment (the operands'
  // FP8 copies are 256-byte aligned)
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int, bool, bool, bool, int>;

  const Plan& plan(const Key& key);

  cudaStream_t stream_;
  bool fast_accum_ = false;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace anvil::cuda
