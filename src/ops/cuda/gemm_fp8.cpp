// cuBLASLt plans for the FP8 GEMMs (gemm_fp8.h). As in gemm.cpp, the row-major product is
// the column-major out^T (N, M) = Q . P^T: cuBLASLt's first operand is Q (N, K) row-major,
// which is column-major (K, N), taken transposed (CUBLAS_OP_T); its second is P, column-major
// (K, M), taken as is. That is the TN layout FP8 needs. The A scale (cuBLASLt's first operand)
// is Q's, N of them in outer-vector mode; the B scale P's, M of them.
#include "ops/cuda/gemm_fp8.h"

#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/gemm.h"

namespace anvil::cuda {

namespace {

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
}

void destroy(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d) {
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(d);
  cublasLtMatmulDescDestroy(desc);
}

}  // namespace

Fp8Gemm::Fp8Gemm(cudaStream_t stream, void* workspace, bool fast_accum)
    : stream_(stream), fast_accum_(fast_accum), workspace_(workspace) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Fp8Gemm::~Fp8Gemm() {
  for (auto& [key, p] : plans_) destroy(p.desc, p.a, p.b, p.d);
  cublasLtDestroy(handle_);
}

const Fp8Gemm::Plan& Fp8Gemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto [m, n, k, ldo, out_type, bias, beta_zero, rowwise, align_d] = key;
  (void)beta_zero;
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(fast_accum_ ? 1 : 0));
  if (rowwise) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
  }
  if (bias) {
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_16BF));
  }
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, u(k), u(n), k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, u(k), u(m), k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, static_cast<cudaDataType_t>(out_type), u(n), u(m), ldo));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = kWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof workspace));
  const auto align = static_cast<uint32_t>(align_d);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align));
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    destroy(p.desc, p.a, p.b, p.d);
    raise(ErrorKind::kUnsupported, "cuBLASLt has no FP8 algorithm for the GEMM (M, N, K) = (", m, ", ", n, ", ", k,
          "), output ", out_type == CUDA_R_32F ? "F32" : "BF16", rowwise ? ", scales per row" : ", scales per tensor",
          ": ", cublasGetStatusString(st),
          rowwise ? " (this cuBLASLt may not scale FP8 GEMMs per row on this GPU: use --fp8 tensorwise)" : "");
  }
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Fp8Gemm::run(void* out, cudaDataType_t out_type, int64_t ldo, Fp8Operand p, Fp8Operand q, int64_t m, int64_t n,
                  int64_t k, float beta, const void* bias, bool rowwise) {
  if (m == 0 || n == 0) return;
  ANVIL_ENSURE(k > 0, kInternal, "FP8 GEMM with an empty inner dimension");
  ANVIL_ENSURE(!bias || out_type == CUDA_R_16BF, kInternal, "FP8 GEMM bias epilogue needs a bf16 output");
  ANVIL_ENSURE(k % 16 == 0 && ldo % 16 == 0, kUnsupported, "FP8 GEMM (M, N, K) = (", m, ", ", n, ", ", k,
               "): FP8 tensor cores need K and the output's row stride to be multiples of 16 (the model's sizes and "
               "the tokens per micro-batch; else use --fp8 off)");
  const Plan& pl =
      plan(Key{m, n, k, ldo, static_cast<int>(out_type), bias != nullptr, beta == 0.0f, rowwise, alignment_of(out)});
  set_desc(pl.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, q.inv_scale);
  set_desc(pl.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.inv_scale);
  if (bias) set_desc(pl.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, pl.desc, &alpha, q.ptr, pl.a, p.ptr, pl.b, &beta, out, pl.d, out, pl.d, &pl.algo,
                              workspace_, kWorkspaceBytes, stream_));
}

}  // namespace anvil::cuda
