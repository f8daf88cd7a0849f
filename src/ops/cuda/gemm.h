// GEMMs of the CUDA backend through cuBLASLt: bf16 operands, fp32 accumulation, bf16 or
// fp32 output, optional bias epilogue, beta = 1 to accumulate into the output.
//
// The interface is row-major, as every tensor in anvil:
//   out (M, N) [row stride ldo] = op(A) (M, K) . op(B) (K, N) (+ bias (N)) + beta * out
// with A stored (M, K) [lda], or (K, M) when trans_a; B stored (K, N) [ldb], or (N, K) when
// trans_b. Row strides let the fused cross-entropy address a bf16 matrix that lives inside
// an fp32 buffer. Plans (descriptors and the heuristic's algorithm) are cached per shape,
// strides and pointer alignment, so a training step pays the heuristic once per shape.
// run_grouped runs many such products of different sizes in one call of cuBLAS's grouped GEMM.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "ops/workspace.h"

namespace anvil::cuda {

// The largest power of two, at most 256, that p's address is a multiple of (cuBLASLt's
// alignment preferences).
int alignment_of(const void* p);

struct GemmOperand {
  const void* ptr = nullptr;
  int64_t ld = 0;
  bool trans = false;
};

// One product of Gemm::run_grouped, row-major as run()'s: out (m, n) [ldo] = op(A) op(B) (+ beta out).
struct GemmProblem {
  void* out = nullptr;
  int64_t ldo = 0;
  GemmOperand a, b;
  int64_t m = 0, n = 0, k = 0;
};

class Gemm {
 public:
  static constexpr size_t kWorkspaceBytes = kGemmWorkspaceBytes;  // the workspace table's (ops/workspace.h)

  // workspace: kWorkspaceBytes of device memory, the caller's, for the Gemm's lifetime.
  // algo_rank: which of cuBLASLt's heuristic candidates to run, best first: 0 in training;
  // others for anvil_bench_ops' comparison (a shape with fewer candidates runs its last).
  Gemm(cudaStream_t stream, void* workspace, int algo_rank = 0);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out_type: CUDA_R_16BF or CUDA_R_32F. bias: bf16 (N) or null; only with a bf16 output.
  void run(void* out, cudaDataType_t out_type, int64_t ldo, GemmOperand a, GemmOperand b, int64_t m, int64_t n,
           int64_t k, float beta, const void* bias);
  // The candidate rank the last run() used (below algo_rank when the shape has fewer).
  int last_rank() const { return last_rank_; }
  // Every problem (each a group of its own) in one call of cuBLAS's cublasGemmGroupedBatchedEx:
  // bf16 operands and output (its grouped GEMM has no bf16 -> fp32 form), fp32 compute, alpha
  // 1 and `beta` (1 adds into out). Sizes and strides are read from the host; the operands'
  // addresses reach the device through `pointers`, the caller's device memory of 3 pointers per
  // problem, written here by one copy in stream order and read by the GEMM after it. A set with
  // rows whose width is not a multiple of 8 elements, or addresses not 16-byte aligned, runs as
  // run() per problem instead. cuBLAS picks its kernels from the
  // problem set alone, so the same set gives the same bits on every run (its reproducibility
  // rule: the same GPU architecture and SM count, one stream per workspace, which the shared
  // workspace below keeps).
  void run_grouped(const std::vector<GemmProblem>& problems, float beta, void* pointers);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    int rank = 0;
  };
  // m, n, k, lda, ldb, ldo, trans_a, trans_b, out type, bias, beta == 0, alignments of A, B, D
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, int, bool, bool, int,
                         int, int>;

  const Plan& plan(const Key& key);

  cudaStream_t stream_;
  int algo_rank_ = 0, last_rank_ = 0;
  cublasLtHandle_t handle_ = nullptr;
  cublasHandle_t blas_ = nullptr;  // run_grouped's, made on its first call, on stream_ and workspace_
  void* workspace_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace anvil::cuda
