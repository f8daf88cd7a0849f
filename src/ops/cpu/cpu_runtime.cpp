// The CPU backend's runtime (cpu_runtime.h): memory, copies, dtype conversion, op timing; and
// make_cpu_ops, the op set on it. The ops are in the files named for them (cpu_ops.h).
#include "ops/cpu/cpu_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/bf16.h"
#include "core/error.h"
#include "core/threads.h"
#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"

namespace anvil {

using namespace cpu;  // the typed views and shared loops of cpu_math.h

void* CpuRuntime::alloc_impl(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  ANVIL_ENSURE(p, kOutOfMemory, "host allocation of ", bytes, " bytes failed");
  return p;
}

void CpuRuntime::release_impl(void* p) { std::free(p); }
void CpuRuntime::upload_impl(Tensor dst, const void* src) { std::memcpy(dst.data, src, dst.bytes()); }
void CpuRuntime::download_impl(void* dst, Tensor src) { std::memcpy(dst, src.data, src.bytes()); }
void CpuRuntime::zero_impl(Tensor t) { std::memset(t.data, 0, t.bytes()); }

void CpuRuntime::begin_op(const std::string& name) {
  auto [it, fresh] = row_.emplace(name, times_.ops.size());
  if (fresh) times_.ops.push_back({name, 0, 0, 0});
  current_ = it->second;
  in_op_ = true;
  start_ = std::chrono::steady_clock::now();
  if (times_.ops.size() == 1 && times_.ops[0].calls == 0) first_start_ = start_;
}

void CpuRuntime::end_op() noexcept {
  const auto end = std::chrono::steady_clock::now();
  OpTime& t = times_.ops[current_];
  const double ms = std::chrono::duration<double, std::milli>(end - start_).count();
  ++t.calls;
  t.device_ms += ms;
  t.host_ms += ms;
  times_.span_ms = std::chrono::duration<double, std::milli>(end - first_start_).count();
  in_op_ = false;
}

Runtime::OpTimes CpuRuntime::take_op_times() {
  OpTimes r;
  std::swap(r, times_);
  row_.clear();
  return r;
}

void CpuRuntime::convert_impl(Tensor dst, Tensor src) {
  const int64_t n = dst.numel();
  if (dst.dtype == src.dtype) {
    if (dst.data != src.data) std::memcpy(dst.data, src.data, dst.bytes());
  } else if (dst.dtype == DType::kBF16) {  // from F32: bf16 gradient reduction
    uint16_t* o = static_cast<uint16_t*>(dst.data);
    const float* x = f32(src);
    parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = f32_to_bf16_bits(x[i]);
    });
  } else {  // BF16 to F32
    float* o = f32(dst);
    const uint16_t* x = static_cast<const uint16_t*>(src.data);
    parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = bf16_bits_to_f32(x[i]);
    });
  }
}

void CpuRuntime::copy_rows_impl(Tensor out, int64_t out_pitch, Tensor in, int64_t in_pitch, int64_t rows,
                            int64_t width) {
  const size_t es = dtype_size(in.dtype);
  char* o = static_cast<char*>(out.data);
  const char* x = static_cast<const char*>(in.data);
  parallel_for(rows, std::max<int64_t>(1, (1 << 16) / width), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      std::memcpy(o + static_cast<size_t>(r * out_pitch) * es, x + static_cast<size_t>(r * in_pitch) * es,
                  static_cast<size_t>(width) * es);
  });
}

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace anvil
