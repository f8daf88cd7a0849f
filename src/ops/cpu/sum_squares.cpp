// The CPU reference of sum_squares (ops.h): a chunked reduction in double.
#include "ops/cpu/cpu_ops.h"

#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::sum_squares_impl(Tensor out, Tensor x) {
  const float* X = f32(x);
  double s = 0;
  chunked_reduce(x.numel(), 1 << 16, 1, &s, [&](int64_t b, int64_t e, double* acc) {
    double a = 0;
    for (int64_t i = b; i < e; ++i) a += static_cast<double>(X[i]) * X[i];
    acc[0] += a;
  });
  f32(out)[0] += static_cast<float>(s);
}

}  // namespace anvil
