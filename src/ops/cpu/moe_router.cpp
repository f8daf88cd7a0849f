// The CPU reference of the MoE router (ops.h): the fp32 softmax, the top-k (ties broken by
// the lower expert index), the renormalisation, and their backward; in double inside a row.
#include "ops/cpu/cpu_ops.h"

#include <cmath>
#include <vector>

#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::moe_router_forward_impl(Tensor probs, Tensor topk_idx, Tensor topk_w, Tensor stats, Tensor logits,
                                     bool norm_topk_prob) {
  const int64_t N = probs.dim(0), E = probs.dim(1), K = topk_idx.cols();
  const float* Lg = f32(logits);
  float *P = f32(probs), *W = f32(topk_w);
  int32_t* Ix = topk_idx.ptr<int32_t>();
  parallel_for(N, 16, [&](int64_t nb, int64_t ne) {
    std::vector<char> taken(static_cast<size_t>(E));
    for (int64_t n = nb; n < ne; ++n) {
      const float* l = Lg + n * E;
      float* p = P + n * E;
      double mx = l[0], sum = 0;
      for (int64_t e = 1; e < E; ++e) mx = std::max(mx, static_cast<double>(l[e]));
      for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(l[e]) - mx);
      for (int64_t e = 0; e < E; ++e) p[e] = static_cast<float>(std::exp(static_cast<double>(l[e]) - mx) / sum);
      std::fill(taken.begin(), taken.end(), 0);
      double picked = 0;
      for (int64_t j = 0; j < K; ++j) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; ++e)
          if (!taken[static_cast<size_t>(e)] && (best < 0 || p[e] > p[best])) best = e;  // first of equals: lower index
        taken[static_cast<size_t>(best)] = 1;
        Ix[n * K + j] = static_cast<int32_t>(best);
        W[n * K + j] = p[best];
        picked += p[best];
      }
      if (norm_topk_prob)
        for (int64_t j = 0; j < K; ++j) W[n * K + j] = static_cast<float>(W[n * K + j] / picked);
    }
  });
  if (!present(stats)) return;
  // Counts and probability sums per expert, tokens in order (one thread: a fixed order).
  std::vector<double> count(static_cast<size_t>(E)), prob(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < K; ++j) count[static_cast<size_t>(Ix[n * K + j])] += 1;
    for (int64_t e = 0; e < E; ++e) prob[static_cast<size_t>(e)] += P[n * E + e];
  }
  float* S = f32(stats);
  for (int64_t e = 0; e < E; ++e) {
    S[e] = static_cast<float>(count[static_cast<size_t>(e)]);
    S[E + e] = static_cast<float>(prob[static_cast<size_t>(e)]);
  }
}

void CpuOps::moe_router_backward_impl(Tensor dlogits, Tensor dtopk_w, Tensor probs, Tensor topk_idx, Tensor topk_w,
                                      Tensor aux_grad, bool norm_topk_prob) {
  const int64_t N = probs.dim(0), E = probs.dim(1), K = topk_idx.cols();
  const float *P = f32(probs), *DW = f32(dtopk_w), *W = f32(topk_w);
  const float* A = present(aux_grad) ? f32(aux_grad) : nullptr;
  const int32_t* Ix = i32(topk_idx);
  float* DL = f32(dlogits);
  parallel_for(N, 16, [&](int64_t nb, int64_t ne) {
    std::vector<double> dp(static_cast<size_t>(E));
    for (int64_t n = nb; n < ne; ++n) {
      const float* p = P + n * E;
      for (int64_t e = 0; e < E; ++e) dp[static_cast<size_t>(e)] = A ? A[e] : 0.0;
      // Through the renormalisation w_j = p_j / S: d p_j = (d w_j - sum_i d w_i w_i) / S.
      double picked = 0, dot_w = 0;
      for (int64_t j = 0; j < K; ++j) {
        picked += p[Ix[n * K + j]];
        dot_w += static_cast<double>(DW[n * K + j]) * W[n * K + j];
      }
      for (int64_t j = 0; j < K; ++j) {
        const double d = norm_topk_prob ? (DW[n * K + j] - dot_w) / picked : DW[n * K + j];
        dp[static_cast<size_t>(Ix[n * K + j])] += d;
      }
      // Through the softmax: d l_e = p_e (d p_e - sum_k p_k d p_k).
      double s = 0;
      for (int64_t e = 0; e < E; ++e) s += p[e] * dp[static_cast<size_t>(e)];
      for (int64_t e = 0; e < E; ++e) DL[n * E + e] = static_cast<float>(p[e] * (dp[static_cast<size_t>(e)] - s));
    }
  });
}

}  // namespace anvil
