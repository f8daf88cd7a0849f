// The CPU reference of the elementwise add (ops.h).
#include "ops/cpu/cpu_ops.h"

#include "core/threads.h"
#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::add_impl(Tensor out, Tensor a, Tensor b) {
  const int64_t n = out.numel();
  const float *A = f32(a), *B = f32(b);
  float* O = f32(out);
  parallel_for(n, 1 << 14, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) O[i] = A[i] + B[i];
  });
}

}  // namespace anvil
