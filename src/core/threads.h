// parallel_for over [0, n) on the machine's cores.
//
// Work is split into contiguous chunks, one per thread, so results that each index
// writes on its own are deterministic whatever the thread count. Small ranges run inline.
#pragma once

#include <cstdint>
#include <functional>

namespace anvil {

int hardware_threads();
// fn(begin, end) is called on disjoint chunks that cover [0, n). min_chunk: the least work
// worth a thread.
void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace anvil
