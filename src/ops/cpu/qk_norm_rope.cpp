// The CPU reference of the per-head RMSNorm of q and k with RoPE (rotate-half), forward and
// backward (ops.h), on packed qkv rows; the norm weights' gradients are a chunked reduction.
#include "ops/cpu/cpu_ops.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

namespace {

// The packed rows: N rows (tokens) of `heads` heads of hd, the first nqk of them q and k;
// row n has the angles of position n % T, or of pos[n] where positions are given.
struct QkLayout {
  QkLayout(const Tensor& in, const Tensor& cos, int n_heads, int n_kv_heads, const Tensor& positions)
      : hd(in.cols()), half(hd / 2), heads(n_heads + 2 * n_kv_heads), nqk(n_heads + n_kv_heads),
        N(in.numel() / (heads * hd)), T(cos.dim(0)), pos(present(positions) ? cpu::i32(positions) : nullptr) {}
  int64_t hd, half, heads, nqk, N, T;
  const int32_t* pos;

  int64_t position(int64_t n) const {
    if (!pos) return n % T;
    ANVIL_ENSURE(pos[n] >= 0 && pos[n] < T, kInternal, "qk_norm_rope: position ", pos[n], " of row ", n,
                 " is outside the tables' ", T);
    return pos[n];
  }
};

// fn(n, h, c, s, scratch) for every head h of every row n, rows in parallel chunks of 4 or
// more: c and s are row n's cos and sin, scratch hd floats of the calling thread.
template <class Fn>
void for_each_head(const QkLayout& L, const Tensor& cos, const Tensor& sin, const Fn& fn) {
  const float *C = f32(cos), *Sn = f32(sin);
  parallel_for(L.N, 4, [&](int64_t nb, int64_t ne) {
    std::vector<float> scratch(static_cast<size_t>(L.hd));
    for (int64_t n = nb; n < ne; ++n) {
      const int64_t at = L.position(n);
      for (int64_t h = 0; h < L.heads; ++h) fn(n, h, C + at * L.half, Sn + at * L.half, scratch.data());
    }
  });
}

}  // namespace

void CpuOps::qk_norm_rope_forward_impl(Tensor out, Tensor rstd, Tensor in, Tensor q_w, Tensor k_w, Tensor cos,
                                       Tensor sin, int n_heads, int n_kv_heads, float eps, Tensor positions) {
  const QkLayout L(in, cos, n_heads, n_kv_heads, positions);
  const int64_t hd = L.hd, half = L.half, heads = L.heads;
  const bool norm = present(q_w);
  const float* X = f32(in);
  float *O = f32(out), *S = norm ? f32(rstd) : nullptr;
  for_each_head(L, cos, sin, [&](int64_t n, int64_t h, const float* c, const float* s, float* y) {
    const float* xr = X + (n * heads + h) * hd;
    float* o = O + (n * heads + h) * hd;
    if (h >= n_heads + n_kv_heads) {  // v: unchanged
      std::memcpy(o, xr, static_cast<size_t>(hd) * 4);
      return;
    }
    if (norm) {
      const float* w = (h < n_heads ? f32(q_w) : f32(k_w));
      const float r = 1.0f / std::sqrt(dot(xr, xr, hd) / static_cast<float>(hd) + eps);
      S[n * (n_heads + n_kv_heads) + h] = r;
      for (int64_t i = 0; i < hd; ++i) y[i] = w[i] * (xr[i] * r);
    } else {
      std::memcpy(y, xr, static_cast<size_t>(hd) * 4);
    }
    for (int64_t i = 0; i < half; ++i) {
      const float a = y[i], b = y[i + half];
      o[i] = a * c[i] - b * s[i];
      o[i + half] = b * c[i] + a * s[i];
    }
  });
}

void CpuOps::qk_norm_rope_backward_impl(Tensor din, Tensor dq_w, Tensor dk_w, Tensor dout, Tensor in, Tensor q_w,
                                        Tensor k_w, Tensor rstd, Tensor cos, Tensor sin, int n_heads, int n_kv_heads,
                                        bool accumulate_dw, Tensor positions) {
  const QkLayout L(in, cos, n_heads, n_kv_heads, positions);
  const int64_t hd = L.hd, half = L.half, heads = L.heads, nqk = L.nqk;
  const bool norm = present(q_w);
  const float *X = f32(in), *G = f32(dout);
  const float* S = norm ? f32(rstd) : nullptr;
  float* DX = f32(din);
  // dy: the gradient before the rotation, per (token, head); kept for the weight sums.
  std::vector<float> dy(static_cast<size_t>(L.N * nqk * hd));
  for_each_head(L, cos, sin, [&](int64_t n, int64_t h, const float* c, const float* s, float*) {
    const float* g = G + (n * heads + h) * hd;
    float* d = DX + (n * heads + h) * hd;
    if (h >= nqk) {
      std::memcpy(d, g, static_cast<size_t>(hd) * 4);
      return;
    }
    float* y = dy.data() + (n * nqk + h) * hd;
    for (int64_t i = 0; i < half; ++i) {  // rotation by -theta
      y[i] = g[i] * c[i] + g[i + half] * s[i];
      y[i + half] = g[i + half] * c[i] - g[i] * s[i];
    }
    if (norm) {
      const float* w = (h < n_heads ? f32(q_w) : f32(k_w));
      norm_row_backward(d, y, X + (n * heads + h) * hd, w, S[n * nqk + h], hd, false);
    } else {
      std::memcpy(d, y, static_cast<size_t>(hd) * 4);
    }
  });
  if (!norm) return;
  std::vector<double> acc(static_cast<size_t>(2 * hd), 0.0);
  chunked_reduce(L.N, 64, 2 * hd, acc.data(), [&](int64_t b, int64_t e, double* a) {
    for (int64_t n = b; n < e; ++n)
      for (int64_t h = 0; h < nqk; ++h) {
        const float* y = dy.data() + (n * nqk + h) * hd;
        const float* x = X + (n * heads + h) * hd;
        const float r = S[n * nqk + h];
        double* dst = a + (h < n_heads ? 0 : hd);
        for (int64_t i = 0; i < hd; ++i) dst[i] += static_cast<double>(y[i]) * (x[i] * r);
      }
  });
  float *DQ = f32(dq_w), *DK = f32(dk_w);
  for (int64_t i = 0; i < hd; ++i) {
    DQ[i] = (accumulate_dw ? DQ[i] : 0.0f) + static_cast<float>(acc[static_cast<size_t>(i)]);
    DK[i] = (accumulate_dw ? DK[i] : 0.0f) + static_cast<float>(acc[static_cast<size_t>(hd + i)]);
  }
}

}  // namespace anvil
