// cuBLASLt plans for row-major GEMMs (gemm.h).
//
// cuBLASLt is column-major. A row-major (R, C) matrix with row stride ld is the same memory
// as a column-major (C, R) matrix with leading dimension ld, so the row-major product
// out = op(A) op(B) is computed as the column-major out^T = op(B)^T op(A)^T: cuBLASLt's
// first operand is our B, its second our A, and (m, n) swap. The bias epilogue adds a
// vector along the rows of the column-major output, which are our columns N.
#include "ops/cuda/gemm.h"

#include <algorithm>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/error.h"

namespace anvil::cuda {

int alignment_of(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && (u % static_cast<uintptr_t>(a)) != 0) a /= 2;
  return a;
}

namespace {

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
}

template <class T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const T& v) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof v));
}

}  // namespace

Gemm::Gemm(cudaStream_t stream, void* workspace, int algo_rank)
    : stream_(stream), algo_rank_(algo_rank), workspace_(workspace) {
  ANVIL_ENSURE(algo_rank >= 0 && algo_rank < 16, kInternal, "GEMM algorithm rank ", algo_rank);
  CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
  }
  cublasLtDestroy(handle_);
  if (blas_) cublasDestroy(blas_);
}

const Gemm::Plan& Gemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto [m, n, k, lda, ldb, ldo, trans_a, trans_b, out_type, bias, beta_zero, align_a, align_b, align_d] = key;
  (void)beta_zero;
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLASLt's first operand is our B (column-major (N, K) after its op), its second our A.
  const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, op_first);
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, op_second);
  if (bias) set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  if (trans_b)
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, u(k), u(n), ldb));
  else
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, u(n), u(k), ldb));
  if (trans_a)
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, u(m), u(k), lda));
  else
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, u(k), u(m), lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, static_cast<cudaDataType_t>(out_type), u(n), u(m), ldo));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kWorkspaceBytes));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(align_b));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(align_a));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(align_d));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(align_d));
  cublasLtMatmulHeuristicResult_t results[16] = {};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.b, p.a, p.d, p.d, pref, algo_rank_ + 1, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
    raise(ErrorKind::kUnsupported, "cuBLASLt has no algorithm for the GEMM (M, N, K) = (", m, ", ", n, ", ", k,
          ") with row strides A ", lda, ", B ", ldb, ", out ", ldo, (trans_a ? ", A transposed" : ""),
          (trans_b ? ", B transposed" : ""), ", output ", out_type == CUDA_R_32F ? "F32" : "BF16", ": ",
          cublasGetStatusString(st));
  }
  p.rank = std::min(algo_rank_, found - 1);
  p.algo = results[p.rank].algo;
  return plans_.emplace(key, p).first->second;
}

void Gemm::run(void* out, cudaDataType_t out_type, int64_t ldo, GemmOperand a, GemmOperand b, int64_t m, int64_t n,
               int64_t k, float beta, const void* bias) {
  if (m == 0 || n == 0) return;
  ANVIL_ENSURE(k > 0, kInternal, "GEMM with an empty inner dimension");
  ANVIL_ENSURE(!bias || out_type == CUDA_R_16BF, kInternal, "GEMM bias epilogue needs a bf16 output");
  const Key key{m,
                n,
                k,
                a.ld,
                b.ld,
                ldo,
                a.trans,
                b.trans,
                static_cast<int>(out_type),
                bias != nullptr,
                beta == 0.0f,
                alignment_of(a.ptr),
                alignment_of(b.ptr),
                alignment_of(out)};
  const Plan& p = plan(key);
  last_rank_ = p.rank;
  if (bias) set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, b.ptr, p.b, a.ptr, p.a, &beta, out, p.d, out, p.d, &p.algo,
                              workspace_, kWorkspaceBytes, stream_));
}

// The column-major form of each problem is run()'s (the file's comment): cuBLAS's A is our B,
// its B our A, (m, n) swapped. The workspace is the cuBLASLt plans' one: both run on stream_
// only, one after the other.
namespace {

// A problem cuBLAS's grouped GEMM takes here: rows of a multiple of 16 bytes and 16-byte aligned
// addresses (every model's widths are multiples of 8). cuBLAS accepts 4-byte ones, but on one
// H200 its kernel for 40-byte rows summed another way than cuBLASLt's: 13 of 192 bf16 outputs
// lay more than one ulp from the loop's (tests/cuda/test_cuda_moe.cpp).
bool grouped_aligned(const GemmProblem& q) {
  return (q.k * 2) % 16 == 0 && alignment_of(q.a.ptr) >= 16 && alignment_of(q.b.ptr) >= 16 &&
         alignment_of(q.out) >= 16;
}

}  // namespace

void Gemm::run_grouped(const std::vector<GemmProblem>& problems, float beta, void* pointers) {
  if (problems.empty()) return;
  // A set with rows of an odd width runs through run(), whose cuBLASLt plans take any alignment.
  if (!std::all_of(problems.begin(), problems.end(), grouped_aligned)) {
    for (const GemmProblem& q : problems) run(q.out, CUDA_R_16BF, q.ldo, q.a, q.b, q.m, q.n, q.k, beta, nullptr);
    return;
  }
  if (!blas_) {
    CUBLAS_CHECK(cublasCreate(&blas_));
    CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, kWorkspaceBytes));
  }
  const size_t g = problems.size();
  std::vector<cublasOperation_t> op_a(g), op_b(g);
  std::vector<int> m(g), n(g), k(g), lda(g), ldb(g), ldc(g), size(g, 1);
  std::vector<float> alpha(g, 1.0f), betas(g, beta);
  std::vector<const void*> ptrs(3 * g);  // cuBLAS's A (our B), B (our A), C
  const auto fits = [](int64_t v) {
    ANVIL_ENSURE(v >= 0 && v <= INT32_MAX, kInternal, "grouped GEMM size ", v, " over cuBLAS's int");
    return static_cast<int>(v);
  };
  for (size_t i = 0; i < g; ++i) {
    const GemmProblem& q = problems[i];
    ANVIL_ENSURE(q.m > 0 && q.n > 0 && q.k > 0, kInternal, "grouped GEMM with an empty problem");
    op_a[i] = q.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    op_b[i] = q.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    m[i] = fits(q.n);
    n[i] = fits(q.m);
    k[i] = fits(q.k);
    lda[i] = fits(q.b.ld);
    ldb[i] = fits(q.a.ld);
    ldc[i] = fits(q.ldo);
    ptrs[i] = q.b.ptr;
    ptrs[g + i] = q.a.ptr;
    ptrs[2 * g + i] = q.out;
  }
  // From pageable memory: the copy returns once ptrs is staged, so ptrs may go out of scope.
  CUDA_CHECK(cudaMemcpyAsync(pointers, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice, stream_));
  const void* const* dev = static_cast<const void* const*>(pointers);
  CUBLAS_CHECK(cublasGemmGroupedBatchedEx(blas_, op_a.data(), op_b.data(), m.data(), n.data(), k.data(), alpha.data(),
                                          dev, CUDA_R_16BF, lda.data(), dev + g, CUDA_R_16BF, ldb.data(), betas.data(),
                                          const_cast<void* const*>(dev + 2 * g), CUDA_R_16BF, ldc.data(),
                                          static_cast<int>(g), size.data(), CUBLAS_COMPUTE_32F));
}

}  // namespace anvil::cuda
