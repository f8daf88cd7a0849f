// The fp32 CPU reference of the op set (ops/ops.h).
//
// Written for clarity and exactness first: every op follows the reference formulas of
// PyTorch/transformers in fp32 (reductions in double where it costs nothing), so that the
// whole model matches the float64 golden fixtures to ~1e-6. It is also what CI trains
// with, several ranks included, so the hot loops are cache-friendly and threaded.
// Determinism: work is split into fixed-size chunks that do not depend on the number of
// threads, and every reduction adds its chunk partials in a fixed order, so results are
// bit-identical across runs and machines.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "core/threads.h"
#include "ops/ops.h"

namespace anvil {
namespace {

float* f32(const Tensor& t) {
  ANVIL_ENSURE(t.dtype == DType::kF32, kInternal, "cpu op: expected F32, got ", dtype_name(t.dtype));
  return t.ptr<float>();
}
const int32_t* i32(const Tensor& t) {
  ANVIL_ENSURE(t.dtype == DType::kI32, kInternal, "cpu op: expected I32, got ", dtype_name(t.dtype));
  return t.ptr<int32_t>();
}
bool present(const Tensor& t) { return t.data != nullptr; }

// Dot product with 8 independent accumulators: vectorizes without -ffast-math and stays
// deterministic.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// Splits [0, n) into chunks of `chunk` (independent of the thread count) and sums the
// per-chunk partial vectors of length m in chunk order into out (+=).
void chunked_reduce(int64_t n, int64_t chunk, int64_t m, double* out,
                    const std::function<void(int64_t, int64_t, double*)>& fn) {
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::vector<double> partial(static_cast<size_t>(chunks * m), 0.0);
  parallel_for(chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) fn(c * chunk, std::min(n, (c + 1) * chunk), partial.data() + c * m);
  });
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t j = 0; j < m; ++j) out[j] += partial[static_cast<size_t>(c * m + j)];
}

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

class CpuOps final : public Ops {
 public:
  Device device() const override { return Device::kCPU; }
  DType compute_dtype() const override { return DType::kF32; }
  std::string name() const override { return "cpu"; }

  void* alloc(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    ANVIL_ENSURE(p, kOutOfMemory, "host allocation of ", bytes, " bytes failed");
    sizes_[p] = bytes;
    stats_.allocated += static_cast<int64_t>(bytes);
    stats_.peak = std::max(stats_.peak, stats_.allocated);
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    auto it = sizes_.find(p);
    ANVIL_ENSURE(it != sizes_.end(), kInternal, "cpu release of a pointer it did not allocate");
    stats_.allocated -= static_cast<int64_t>(it->second);
    sizes_.erase(it);
    std::free(p);
  }
  MemoryStats memory_stats() const override { return stats_; }
  void upload(Tensor dst, const void* src) override { std::memcpy(dst.data, src, dst.bytes()); }
  void download(void* dst, Tensor src) override { std::memcpy(dst, src.data, src.bytes()); }
  void zero(Tensor t) override { std::memset(t.data, 0, t.bytes()); }
  void convert(Tensor dst, Tensor src) override {
    ANVIL_ENSURE(dst.numel() == src.numel(), kInternal, "convert: sizes differ");
    const int64_t n = dst.numel();
    if (dst.dtype == src.dtype) {
      if (dst.data != src.data) std::memcpy(dst.data, src.data, dst.bytes());
    } else if (dst.dtype == DType::kBF16 && src.dtype == DType::kF32) {  // bf16 gradient reduction
      uint16_t* o = static_cast<uint16_t*>(dst.data);
      const float* x = f32(src);
      parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) o[i] = f32_to_bf16_bits(x[i]);
      });
    } else if (dst.dtype == DType::kF32 && src.dtype == DType::kBF16) {
      float* o = f32(dst);
      const uint16_t* x = static_cast<const uint16_t*>(src.data);
      parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) o[i] = bf16_bits_to_f32(x[i]);
      });
    } else {
      raise(ErrorKind::kInternal, "cpu convert: ", dtype_name(src.dtype), " to ", dtype_name(dst.dtype));
    }
  }
  void synchronize() override {}

  void linear_forward(Tensor y, Tensor x, Tensor w, Tensor bias) override {
    const int64_t M = x.rows(), K = x.cols(), N = w.dim(0);
    ANVIL_ENSURE(w.cols() == K && y.rows() == M && y.cols() == N, kInternal, "linear_forward shapes: x ",
                 x.shape.str(), " w ", w.shape.str(), " y ", y.shape.str());
    const float *X = f32(x), *W = f32(w), *B = present(bias) ? f32(bias) : nullptr;
    float* Y = f32(y);
    parallel_for(M, 4, [&](int64_t mb, int64_t me) {
      // Blocks of rows of W stay in cache across the rows of x.
      constexpr int64_t kNB = 64;
      for (int64_t nb = 0; nb < N; nb += kNB) {
        const int64_t ne = std::min(N, nb + kNB);
        for (int64_t m = mb; m < me; ++m) {
          const float* xr = X + m * K;
          float* yr = Y + m * N;
          for (int64_t n = nb; n < ne; ++n) yr[n] = dot(xr, W + n * K, K) + (B ? B[n] : 0.0f);
        }
      }
    });
  }

  void linear_backward_input(Tensor dx, Tensor dy, Tensor w, bool accumulate) override {
    const int64_t M = dy.rows(), N = dy.cols(), K = w.cols();
    ANVIL_ENSURE(w.dim(0) == N && dx.rows() == M && dx.cols() == K, kInternal, "linear_backward_input shapes");
    const float *DY = f32(dy), *W = f32(w);
    float* DX = f32(dx);
    parallel_for(M, 4, [&](int64_t mb, int64_t me) {
      for (int64_t m = mb; m < me; ++m) {
        float* r = DX + m * K;
        if (!accumulate) std::fill(r, r + K, 0.0f);
        const float* g = DY + m * N;
        for (int64_t n = 0; n < N; ++n)
          if (g[n] != 0.0f) axpy(r, g[n], W + n * K, K);
      }
    });
  }

  void linear_backward_weight(Tensor dw, Tensor dbias, Tensor dy, Tensor x, bool accumulate) override {
    const int64_t M = dy.rows(), N = dy.cols(), K = x.cols();
    ANVIL_ENSURE(x.rows() == M && dw.dim(0) == N && dw.cols() == K, kInternal, "linear_backward_weight shapes");
    const float *DY = f32(dy), *X = f32(x);
    float* DW = f32(dw);
    float* DB = present(dbias) ? f32(dbias) : nullptr;
    parallel_for(N, 8, [&](int64_t nb, int64_t ne) {
      for (int64_t n = nb; n < ne; ++n) {
        float* r = DW + n * K;
        if (!accumulate) std::fill(r, r + K, 0.0f);
        double bsum = 0;
        for (int64_t m = 0; m < M; ++m) {
          const float g = DY[m * N + n];
          bsum += g;
          if (g != 0.0f) axpy(r, g, X + m * K, K);
        }
        if (DB) DB[n] = (accumulate ? DB[n] : 0.0f) + static_cast<float>(bsum);
      }
    });
  }

  void embedding_forward(Tensor out, Tensor ids, Tensor table) override {
    const int64_t N = ids.numel(), C = table.cols(), V = table.dim(0);
    const int32_t* I = i32(ids);
    const float* T = f32(table);
    float* O = f32(out);
    for (int64_t n = 0; n < N; ++n) {
      ANVIL_ENSURE(I[n] >= 0 && I[n] < V, kInvalidInput, "token id ", I[n], " at position ", n,
                   " is outside the vocabulary (", V, ")");
      std::memcpy(O + n * C, T + static_cast<int64_t>(I[n]) * C, static_cast<size_t>(C) * 4);
    }
  }

  void embedding_backward(Tensor dtable, Tensor ids, Tensor dout, bool accumulate) override {
    const int64_t N = ids.numel(), C = dtable.cols();
    const int32_t* I = i32(ids);
    const float* D = f32(dout);
    float* T = f32(dtable);
    if (!accumulate) std::fill(T, T + dtable.numel(), 0.0f);
    // Threads own column ranges, so every row is updated in token order.
    parallel_for(C, 16, [&](int64_t cb, int64_t ce) {
      for (int64_t n = 0; n < N; ++n) {
        float* row = T + static_cast<int64_t>(I[n]) * C;
        const float* d = D + n * C;
        for (int64_t c = cb; c < ce; ++c) row[c] += d[c];
      }
    });
  }

  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor x, Tensor w, float eps) override {
    const int64_t R = x.rows(), D = x.cols();
    const float *X = f32(x), *W = f32(w);
    float *O = f32(out), *S = f32(rstd);
    parallel_for(R, 16, [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) {
        const float* xr = X + r * D;
        const float var = dot(xr, xr, D) / static_cast<float>(D);
        const float s = 1.0f / std::sqrt(var + eps);
        S[r] = s;
        for (int64_t i = 0; i < D; ++i) O[r * D + i] = W[i] * (xr[i] * s);
      }
    });
  }

  void rmsnorm_backward(Tensor dx, Tensor dw, Tensor dout, Tensor x, Tensor w, Tensor rstd,
                        bool accumulate, bool accumulate_dw) override {
    const int64_t R = x.rows(), D = x.cols();
    const float *X = f32(x), *W = f32(w), *G = f32(dout), *S = f32(rstd);
    float* DX = f32(dx);
    parallel_for(R, 16, [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) norm_row_backward(DX + r * D, G + r * D, X + r * D, W, S[r], D, accumulate);
    });
    std::vector<double> dws(static_cast<size_t>(D), 0.0);
    chunked_reduce(R, 64, D, dws.data(), [&](int64_t b, int64_t e, double* acc) {
      for (int64_t r = b; r < e; ++r)
        for (int64_t i = 0; i < D; ++i) acc[i] += static_cast<double>(G[r * D + i]) * (X[r * D + i] * S[r]);
    });
    float* DW = f32(dw);
    for (int64_t i = 0; i < D; ++i) DW[i] = (accumulate_dw ? DW[i] : 0.0f) + static_cast<float>(dws[static_cast<size_t>(i)]);
  }

  void qk_norm_rope_forward(Tensor out, Tensor rstd, Tensor in, Tensor q_w, Tensor k_w, Tensor cos, Tensor sin,
                            int n_heads, int n_kv_heads, float eps) override {
    const int64_t hd = in.cols(), half = hd / 2, heads = n_heads + 2 * n_kv_heads;
    const int64_t N = in.numel() / (heads * hd), T = cos.dim(0);
    const bool norm = present(q_w);
    const float *X = f32(in), *C = f32(cos), *Sn = f32(sin);
    float *O = f32(out), *S = norm ? f32(rstd) : nullptr;
    parallel_for(N, 4, [&](int64_t nb, int64_t ne) {
      std::vector<float> y(static_cast<size_t>(hd));
      for (int64_t n = nb; n < ne; ++n) {
        const float* c = C + (n % T) * half;
        const float* s = Sn + (n % T) * half;
        for (int64_t h = 0; h < heads; ++h) {
          const float* xr = X + (n * heads + h) * hd;
          float* o = O + (n * heads + h) * hd;
          if (h >= n_heads + n_kv_heads) {  // v: unchanged
            std::memcpy(o, xr, static_cast<size_t>(hd) * 4);
            continue;
          }
          if (norm) {
            const float* w = (h < n_heads ? f32(q_w) : f32(k_w));
            const float r = 1.0f / std::sqrt(dot(xr, xr, hd) / static_cast<float>(hd) + eps);
            S[n * (n_heads + n_kv_heads) + h] = r;
            for (int64_t i = 0; i < hd; ++i) y[static_cast<size_t>(i)] = w[i] * (xr[i] * r);
          } else {
            std::memcpy(y.data(), xr, static_cast<size_t>(hd) * 4);
          }
          for (int64_t i = 0; i < half; ++i) {
            const float a = y[static_cast<size_t>(i)], b = y[static_cast<size_t>(i + half)];
            o[i] = a * c[i] - b * s[i];
            o[i + half] = b * c[i] + a * s[i];
          }
        }
      }
    });
  }

  void qk_norm_rope_backward(Tensor din, Tensor dq_w, Tensor dk_w, Tensor dout, Tensor in, Tensor q_w, Tensor k_w,
                             Tensor rstd, Tensor cos, Tensor sin, int n_heads, int n_kv_heads,
                             bool accumulate_dw) override {
    const int64_t hd = in.cols(), half = hd / 2, heads = n_heads + 2 * n_kv_heads, nqk = n_heads + n_kv_heads;
    const int64_t N = in.numel() / (heads * hd), T = cos.dim(0);
    const bool norm = present(q_w);
    const float *X = f32(in), *G = f32(dout), *C = f32(cos), *Sn = f32(sin);
    const float* S = norm ? f32(rstd) : nullptr;
    float* DX = f32(din);
    // dy: the gradient before the rotation, per (token, head); kept for the weight sums.
    std::vector<float> dy(static_cast<size_t>(N * nqk * hd));
    parallel_for(N, 4, [&](int64_t nb, int64_t ne) {
      for (int64_t n = nb; n < ne; ++n) {
        const float* c = C + (n % T) * half;
        const float* s = Sn + (n % T) * half;
        for (int64_t h = 0; h < heads; ++h) {
          const float* g = G + (n * heads + h) * hd;
          float* d = DX + (n * heads + h) * hd;
          if (h >= nqk) {
            std::memcpy(d, g, static_cast<size_t>(hd) * 4);
            continue;
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
        }
      }
    });
    if (!norm) return;
    std::vector<double> acc(static_cast<size_t>(2 * hd), 0.0);
    chunked_reduce(N, 64, 2 * hd, acc.data(), [&](int64_t b, int64_t e, double* a) {
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

  void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_heads, int n_kv_heads) override {
    const int64_t B = qkv.dim(0), T = qkv.dim(1), heads = n_heads + 2 * n_kv_heads, hd = qkv.dim(3);
    const int64_t group = n_heads / n_kv_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const float* QKV = f32(qkv);
    float *O = f32(out), *L = f32(lse);
    parallel_for(B * n_heads, 1, [&](int64_t jb, int64_t je) {
      std::vector<float> p(static_cast<size_t>(T));
      for (int64_t j = jb; j < je; ++j) {
        const int64_t b = j / n_heads, h = j % n_heads, kvh = n_heads + h / group, vh = kvh + n_kv_heads;
        for (int64_t t = 0; t < T; ++t) {
          const float* q = QKV + ((b * T + t) * heads + h) * hd;
          float mx = -INFINITY;
          for (int64_t u = 0; u <= t; ++u) {
            p[static_cast<size_t>(u)] = dot(q, QKV + ((b * T + u) * heads + kvh) * hd, hd) * scale;
            mx = std::max(mx, p[static_cast<size_t>(u)]);
          }
          double sum = 0;
          for (int64_t u = 0; u <= t; ++u) {
            p[static_cast<size_t>(u)] = std::exp(p[static_cast<size_t>(u)] - mx);
            sum += p[static_cast<size_t>(u)];
          }
          float* o = O + ((b * T + t) * n_heads + h) * hd;
          std::fill(o, o + hd, 0.0f);
          const float inv = static_cast<float>(1.0 / sum);
          for (int64_t u = 0; u <= t; ++u) axpy(o, p[static_cast<size_t>(u)] * inv, QKV + ((b * T + u) * heads + vh) * hd, hd);
          L[(b * n_heads + h) * T + t] = mx + static_cast<float>(std::log(sum));
        }
      }
    });
  }

  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_heads,
                          int n_kv_heads) override {
    const int64_t B = qkv.dim(0), T = qkv.dim(1), heads = n_heads + 2 * n_kv_heads, hd = qkv.dim(3);
    const int64_t group = n_heads / n_kv_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const float *QKV = f32(qkv), *G = f32(dout), *O = f32(out), *L = f32(lse);
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
            for (int64_t u = 0; u <= t; ++u) {
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

  void attention_cached(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, Tensor slots, Tensor positions,
                        int n_heads, int n_kv_heads) override {
    const int64_t R = slots.numel(), heads = n_heads + 2 * n_kv_heads, hd = qkv.cols();
    const int64_t S = k_cache.dim(0), P = k_cache.dim(2), group = n_heads / n_kv_heads;
    ANVIL_ENSURE(qkv.numel() == R * heads * hd && out.numel() == R * n_heads * hd && positions.numel() == R &&
                     k_cache.shape.ndim == 4 && k_cache.dim(1) == n_kv_heads && k_cache.dim(3) == hd &&
                     v_cache.numel() == k_cache.numel(),
                 kInternal, "attention_cached shapes: qkv ", qkv.shape.str(), " cache ", k_cache.shape.str());
    const float* QKV = f32(qkv);
    const int32_t *SL = i32(slots), *PO = i32(positions);
    float *K = f32(k_cache), *V = f32(v_cache), *O = f32(out);
    auto at = [&](float* cache, int64_t slot, int64_t g, int64_t pos) { return cache + ((slot * n_kv_heads + g) * P + pos) * hd; };
    for (int64_t r = 0; r < R; ++r) {
      ANVIL_ENSURE(SL[r] >= 0 && SL[r] < S && PO[r] >= 0 && PO[r] < P, kInternal, "attention_cached: row ", r,
                   " at slot ", SL[r], " position ", PO[r], " is outside the cache ", k_cache.shape.str());
      for (int64_t g = 0; g < n_kv_heads; ++g) {
        std::memcpy(at(K, SL[r], g, PO[r]), QKV + (r * heads + n_heads + g) * hd, static_cast<size_t>(hd) * 4);
        std::memcpy(at(V, SL[r], g, PO[r]), QKV + (r * heads + n_heads + n_kv_heads + g) * hd,
                    static_cast<size_t>(hd) * 4);
      }
    }
    // The same arithmetic as attention_forward, one query row against its slot's cache.
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    parallel_for(R * n_heads, 1, [&](int64_t jb, int64_t je) {
      std::vector<float> p(static_cast<size_t>(P));
      for (int64_t j = jb; j < je; ++j) {
        const int64_t r = j / n_heads, h = j % n_heads, g = h / group, n = PO[r] + 1;
        const float* q = QKV + (r * heads + h) * hd;
        float mx = -INFINITY;
        for (int64_t u = 0; u < n; ++u) {
          p[static_cast<size_t>(u)] = dot(q, at(K, SL[r], g, u), hd) * scale;
          mx = std::max(mx, p[static_cast<size_t>(u)]);
        }
        double sum = 0;
        for (int64_t u = 0; u < n; ++u) {
          p[static_cast<size_t>(u)] = std::exp(p[static_cast<size_t>(u)] - mx);
          sum += p[static_cast<size_t>(u)];
        }
        float* o = O + (r * n_heads + h) * hd;
        std::fill(o, o + hd, 0.0f);
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t u = 0; u < n; ++u) axpy(o, p[static_cast<size_t>(u)] * inv, at(V, SL[r], g, u), hd);
      }
    });
  }

  void argmax_rows(Tensor out, Tensor x) override {
    const int64_t R = x.rows(), V = x.cols();
    ANVIL_ENSURE(out.numel() == R, kInternal, "argmax_rows: out ", out.shape.str(), " for x ", x.shape.str());
    const float* X = f32(x);
    int32_t* O = out.ptr<int32_t>();
    for (int64_t r = 0; r < R; ++r) O[r] = static_cast<int32_t>(std::max_element(X + r * V, X + (r + 1) * V) - (X + r * V));
  }

  void swiglu_forward(Tensor out, Tensor gate_up) override {
    const int64_t N = gate_up.rows(), I = gate_up.cols() / 2;
    const float* GU = f32(gate_up);
    float* O = f32(out);
    parallel_for(N, 16, [&](int64_t nb, int64_t ne) {
      for (int64_t n = nb; n < ne; ++n)
        for (int64_t i = 0; i < I; ++i) O[n * I + i] = silu(GU[n * 2 * I + i]) * GU[n * 2 * I + I + i];
    });
  }

  void swiglu_backward(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) override {
    if (act.data) swiglu_forward(act, gate_up);
    const int64_t N = gate_up.rows(), I = gate_up.cols() / 2;
    const float *GU = f32(gate_up), *G = f32(dout);
    float* D = f32(dgate_up);
    parallel_for(N, 16, [&](int64_t nb, int64_t ne) {
      for (int64_t n = nb; n < ne; ++n)
        for (int64_t i = 0; i < I; ++i) {
          const float a = GU[n * 2 * I + i], u = GU[n * 2 * I + I + i], g = G[n * I + i];
          const float sig = 1.0f / (1.0f + std::exp(-a));
          D[n * 2 * I + i] = g * u * sig * (1.0f + a * (1.0f - sig));
          D[n * 2 * I + I + i] = g * a * sig;
        }
    });
  }

  void add(Tensor out, Tensor a, Tensor b) override {
    const int64_t n = out.numel();
    const float *A = f32(a), *B = f32(b);
    float* O = f32(out);
    parallel_for(n, 1 << 14, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) O[i] = A[i] + B[i];
    });
  }

  void cross_entropy_forward_backward(Tensor loss_sum, Tensor dh, Tensor dw, Tensor h, Tensor w, Tensor targets,
                                      float loss_scale, Tensor logits, bool accumulate_dw) override {
    const int64_t N = h.rows(), C = h.cols(), V = w.dim(0);
    const float *H = f32(h), *W = f32(w);
    const int32_t* Y = i32(targets);
    ANVIL_ENSURE(present(dh) == present(dw), kInternal, "cross_entropy: dh and dw are given together or not at all");
    const bool grads = present(dh);
    float *DH = grads ? f32(dh) : nullptr, *DW = grads ? f32(dw) : nullptr;
    float* LOG = present(logits) ? f32(logits) : nullptr;
    if (grads && !accumulate_dw) std::fill(DW, DW + dw.numel(), 0.0f);
    constexpr int64_t kRows = 32;  // rows per chunk: the chunk's logits are kRows x V
    std::vector<float> z(static_cast<size_t>(kRows * V));
    double total = 0;
    for (int64_t r0 = 0; r0 < N; r0 += kRows) {
      const int64_t rows = std::min(kRows, N - r0);
      std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);
      parallel_for(rows, 1, [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          const float* hr = H + (r0 + r) * C;
          float* zr = z.data() + r * V;
          for (int64_t v = 0; v < V; ++v) zr[v] = dot(hr, W + v * C, C);
          if (LOG) std::memcpy(LOG + (r0 + r) * V, zr, static_cast<size_t>(V) * 4);
          const int32_t y = Y[r0 + r];
          if (y < 0) {  // ignored: no loss, no gradient
            std::fill(zr, zr + V, 0.0f);
            continue;
          }
          ANVIL_ENSURE(y < V, kInvalidInput, "target id ", y, " is outside the vocabulary (", V, ")");
          float mx = -INFINITY;
          for (int64_t v = 0; v < V; ++v) mx = std::max(mx, zr[v]);
          double sum = 0;
          for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(zr[v] - mx));
          const double lse = mx + std::log(sum);
          row_loss[static_cast<size_t>(r)] = lse - zr[y];
          for (int64_t v = 0; v < V; ++v)
            zr[v] = static_cast<float>(std::exp(static_cast<double>(zr[v]) - lse)) * loss_scale;
          zr[y] -= loss_scale;
        }
      });
      for (double l : row_loss) total += l;
      if (!grads) continue;
      // dh = dz . W ; dW += dz^T . h
      parallel_for(rows, 1, [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          float* d = DH + (r0 + r) * C;
          std::fill(d, d + C, 0.0f);
          const float* zr = z.data() + r * V;
          for (int64_t v = 0; v < V; ++v)
            if (zr[v] != 0.0f) axpy(d, zr[v], W + v * C, C);
        }
      });
      parallel_for(V, 64, [&](int64_t vb, int64_t ve) {
        for (int64_t v = vb; v < ve; ++v)
          for (int64_t r = 0; r < rows; ++r) {
            const float g = z[static_cast<size_t>(r * V + v)];
            if (g != 0.0f) axpy(DW + v * C, g, H + (r0 + r) * C, C);
          }
      });
    }
    f32(loss_sum)[0] += static_cast<float>(total);
  }

  void adamw_step(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWHyper& hp, float grad_scale, Tensor copy,
                  bool zero_grad) override {
    const int64_t n = param.numel();
    float *P = f32(param), *G = f32(grad);
    float* Cp = present(copy) && copy.data != param.data ? f32(copy) : nullptr;
    ANVIL_ENSURE(!Cp || copy.numel() == n, kInternal, "adamw_step: copy has ", copy.numel(), " elements, param ", n);
    adamw(n, m, v, hp, [&](int64_t i) { return G[i] * grad_scale; },
          [&](int64_t i, auto&& update) {
            update(P[i]);
            if (Cp) Cp[i] = P[i];
            if (zero_grad) G[i] = 0.0f;
          });
  }

  void adamw_step_split(Tensor hi, Tensor lo, Tensor grad, Tensor m, Tensor v, const AdamWHyper& hp,
                        float grad_scale) override {
    ANVIL_ENSURE(hi.dtype == DType::kBF16 && lo.dtype == DType::kI16 && lo.numel() == hi.numel(), kInternal,
                 "adamw_step_split: hi must be BF16 and lo I16, of one size");
    auto* H = hi.ptr<uint16_t>();
    auto* L = lo.ptr<int16_t>();
    const float* G = f32(grad);
    adamw(hi.numel(), m, v, hp, [&](int64_t i) { return G[i] * grad_scale; },
          [&](int64_t i, auto&& update) {
            float p = join_master(H[i], L[i]);
            update(p);
            split_master(p, &H[i], &L[i]);
          });
  }

  void sum_squares(Tensor out, Tensor x) override {
    const float* X = f32(x);
    double s = 0;
    chunked_reduce(x.numel(), 1 << 16, 1, &s, [&](int64_t b, int64_t e, double* acc) {
      double a = 0;
      for (int64_t i = b; i < e; ++i) a += static_cast<double>(X[i]) * X[i];
      acc[0] += a;
    });
    f32(out)[0] += static_cast<float>(s);
  }

 private:
  std::unordered_map<void*, size_t> sizes_;
  MemoryStats stats_;

  // PyTorch's AdamW over n elements: grad(i) is the scaled gradient; param(i, update) calls
  // update on element i's parameter (wherever it is held) and stores what it needs.
  template <class Grad, class Param>
  static void adamw(int64_t n, Tensor m, Tensor v, const AdamWHyper& hp, Grad grad, Param param) {
    float *M = f32(m), *Vv = f32(v);
    // Scalars as torch.optim.AdamW computes them (Python floats), used in fp32.
    const double bc1 = 1.0 - std::pow(static_cast<double>(hp.beta1), static_cast<double>(hp.step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(hp.beta2), static_cast<double>(hp.step));
    const float step_size = static_cast<float>(hp.lr / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    const float decay = static_cast<float>(1.0 - static_cast<double>(hp.lr) * hp.weight_decay);
    const float w1 = static_cast<float>(1.0 - static_cast<double>(hp.beta1));
    const float w2 = static_cast<float>(1.0 - static_cast<double>(hp.beta2));
    parallel_for(n, 1 << 15, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) {
        const float g = grad(i);
        param(i, [&](float& p) {
          p *= decay;
          M[i] += w1 * (g - M[i]);
          Vv[i] = Vv[i] * hp.beta2 + w2 * g * g;
          const float denom = std::sqrt(Vv[i]) / bc2_sqrt + hp.eps;
          p += -step_size * (M[i] / denom);
        });
      }
    });
  }

  // dx (=, or +=) for y = w * x * r, r = 1/sqrt(mean(x^2) + eps), given dy.
  static void norm_row_backward(float* dx, const float* dy, const float* x, const float* w, float r, int64_t D,
                                bool accumulate) {
    double gx = 0;
    for (int64_t i = 0; i < D; ++i) gx += static_cast<double>(dy[i]) * w[i] * x[i];
    const float c = static_cast<float>(gx / static_cast<double>(D)) * r * r * r;
    for (int64_t i = 0; i < D; ++i) {
      const float v = dy[i] * w[i] * r - c * x[i];
      dx[i] = accumulate ? dx[i] + v : v;
    }
  }
};

}  // namespace

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace anvil
