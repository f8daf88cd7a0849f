// The CPU reference of causal GQA attention, forward and backward (ops.h): one task per
// (batch, head) forward, per (batch, kv head) backward, so no two tasks write one row. With
// packed documents (positions) each query's keys start at its document's first token.
#include "ops/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

namespace {

// The first key that query t of sequence b attends to: its document's first token (ops.h),
// or the sequence's without positions.
int64_t first_key(const int32_t* pos, int64_t b, int64_t T, int64_t t) {
  if (!pos) return 0;
  const int32_t p = pos[b * T + t];
  ANVIL_ENSURE(p >= 0 && p <= t, kInternal, "attention: position ", p, " of token ", t, " of sequence ", b,
               " is outside the sequence");
  return t - p;
}

}  // namespace

void CpuOps::attention_forward_impl(Tensor out, Tensor lse, Tensor qkv, int n_heads, int n_kv_heads,
                                    const Documents& documents) {
  const int64_t B = qkv.dim(0), T = qkv.dim(1), heads = n_heads + 2 * n_kv_heads, hd = qkv.dim(3);
  const int64_t group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* QKV = f32(qkv);
  const int32_t* P = present(documents.positions) ? i32(documents.positions) : nullptr;
  float *O = f32(out), *L = f32(lse);
  parallel_for(B * n_heads, 1, [&](int64_t jb, int64_t je) {
    std::vector<float> p(static_cast<size_t>(T));
    for (int64_t j = jb; j < je; ++j) {
      const int64_t b = j / n_heads, h = j % n_heads, kvh = n_heads + h / group, vh = kvh + n_kv_heads;
      for (int64_t t = 0; t < T; ++t) {
        const float* q = QKV + ((b * T + t) * heads + h) * hd;
        const int64_t u0 = first_key(P, b, T, t);
        float mx = -INFINITY;
        for (int64_t u = u0; u <= t; ++u) {
          p[static_cast<size_t>(u)] = dot(q, QKV + ((b * T + u) * heads + kvh) * hd, hd) * scale;
          mx = std::max(mx, p[static_cast<size_t>(u)]);
        }
        double sum = 0;
        for (int64_t u = u0; u <= t; ++u) {
          p[static_cast<size_t>(u)] = std::exp(p[static_cast<size_t>(u)] - mx);
          sum += p[static_cast<size_t>(u)];
        }
        float* o = O + ((b * T + t) * n_heads + h) * hd;
        std::fill(o, o + hd, 0.0f);
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t u = u0; u <= t; ++u)
          axpy(o, p[static_cast<size_t>(u)] * inv, QKV + ((b * T + u) * heads + vh) * hd, hd);
        L[(b * n_heads + h) * T + t] = mx + static_cast<float>(std::log(sum));
      }
    }
  });
}

void CpuOps::attention_backward_impl(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_heads,
                                     int n_kv_heads, const Documents& documents) {
  const int64_t B = qkv.dim(0), T = qkv.dim(1), heads = n_heads + 2 * n_kv_heads, hd = qkv.dim(3);
  const int64_t group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float *QKV = f32(qkv), *G = f32(dout), *O = f32(out), *L = f32(lse);
  const int32_t* P = present(documents.positions) ? i32(documents.positions) : nullptr;
  float* D = f32(dqkv);
  // One task per (batch, kv head): it owns dk and dv of that head and dq of its group.
  parallel_for(B * n_kv_heads, 1, [&](int64_t jb, int64_t je) {
    for (int64_t j = jb; j < je; ++j) {
      const int64_t b = j / n_kv_heads, g = j % n_kv_heads;
      const int64_t kh = n_heads + g, vh = n_heads + n_kv_heads + g;
      for (int64_t t = 0; t < T; ++t) {
        std::fill(D + ((b * T + t) * heads + kh) * hd, D + ((b * T + t) * heads + kh) * hd + hd, 0.0f);
        std::fill(D + ((b * T + t) * heads + vh) * hd, D + ((b * T + t) * heads + vh) * hd + hd, 0.0f);
      }
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          const float* q = QKV + ((b * T + t) * heads + h) * hd;
          const float* go = G + ((b * T + t) * n_heads + h) * hd;
          const float* o = O + ((b * T + t) * n_heads + h) * hd;
          const float l = L[(b * n_heads + h) * T + t];
          const float delta = dot(go, o, hd);
          float* dq = D + ((b * T + t) * heads + h) * hd;
          std::fill(dq, dq + hd, 0.0f);
          for (int64_t u = first_key(P, b, T, t); u <= t; ++u) {
            const float* k = QKV + ((b * T + u) * heads + kh) * hd;
            const float* v = QKV + ((b * T + u) * heads + vh) * hd;
            const float p = std::exp(dot(q, k, hd) * scale - l);
            axpy(D + ((b * T + u) * heads + vh) * hd, p, go, hd);  // dv += p * dout
            const float dsv = p * (dot(go, v, hd) - delta) * scale;
            axpy(dq, dsv, k, hd);
            axpy(D + ((b * T + u) * heads + kh) * hd, dsv, q, hd);  // dk += ds * q
          }
        }
      }
    }
  });
}

}  // namespace anvil
