// The CPU reference of attention against a KV cache (ops.h, attention_cached): the cache
// writes, then attention_forward's arithmetic for each row against its slot.
#include "ops/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::attention_cached_impl(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, Tensor slots,
                                   Tensor positions, int n_heads, int n_kv_heads) {
  const int64_t R = slots.numel(), heads = n_heads + 2 * n_kv_heads, hd = qkv.cols();
  const int64_t S = k_cache.dim(0), P = k_cache.dim(2), group = n_heads / n_kv_heads;
  const float* QKV = f32(qkv);
  const int32_t *SL = i32(slots), *PO = i32(positions);
  float *K = f32(k_cache), *V = f32(v_cache), *O = f32(out);
  auto at = [&](float* cache, int64_t slot, int64_t g, int64_t pos) {
    return cache + ((slot * n_kv_heads + g) * P + pos) * hd;
  };
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

}  // namespace anvil
