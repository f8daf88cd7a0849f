// The chunked reduction of cpu_math.h.
#include "ops/cpu/cpu_math.h"

#include <algorithm>
#include <vector>

#include "core/threads.h"

namespace anvil::cpu {

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

}  // namespace anvil::cpu
