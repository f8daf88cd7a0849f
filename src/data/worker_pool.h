// Persistent worker threads for the data path.
//
// Unlike parallel_for (core/threads.h), which starts threads per call, the workers live as
// long as the pool, so each keeps its thread-local tokenizer caches from batch to batch.
// run(n, fn) calls fn(i) for every i in [0, n) across the workers and the caller (dynamic
// scheduling, one index at a time) and returns when all are done. fn must not throw: record
// errors per index instead, so that the caller reports the first one in input order.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace anvil {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void run(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void work();
  void loop();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  std::atomic<int64_t> next_{0};
  int64_t n_ = 0;
  int active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace anvil
