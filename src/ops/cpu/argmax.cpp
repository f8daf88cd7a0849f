// The CPU reference of argmax_rows (ops.h): the first largest element of each row.
#include "ops/cpu/cpu_ops.h"

#include <algorithm>

#include "ops/cpu/cpu_math.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void CpuOps::argmax_rows_impl(Tensor out, Tensor x) {
  const int64_t R = x.rows(), V = x.cols();
  const float* X = f32(x);
  int32_t* O = out.ptr<int32_t>();
  for (int64_t r = 0; r < R; ++r)
    O[r] = static_cast<int32_t>(std::max_element(X + r * V, X + (r + 1) * V) - (X + r * V));
}

}  // namespace anvil
