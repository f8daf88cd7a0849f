// The runtime's front (runtime.h): the memory accounting of alloc/release, and the checks of
// every copy, as the op front checks an op's tensors (op_checks.h: an error naming the call and
// the tensor); zero, convert and copy_rows timed as ops.
#include "ops/runtime.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "ops/op_checks.h"

namespace anvil {

namespace {

// The runtime's checks name each tensor's dtype, so the compute dtype is never asked.
OpChecks checks_of(const Runtime& rt, const char* call) { return OpChecks(call, rt.device(), DType::kF32); }

}  // namespace

// ---- memory
void* Runtime::alloc(size_t bytes) {
  void* p = alloc_impl(bytes);
  sizes_[p] = bytes;
  stats_.allocated += static_cast<int64_t>(bytes);
  stats_.peak = std::max(stats_.peak, stats_.allocated);
  return p;
}

void Runtime::release(void* p) {
  if (!p) return;
  auto it = sizes_.find(p);
  ANVIL_ENSURE(it != sizes_.end(), kInternal, name(), ": release of a pointer this backend did not allocate");
  stats_.allocated -= static_cast<int64_t>(it->second);
  sizes_.erase(it);
  release_impl(p);
}

void* Runtime::alloc_host_impl(size_t bytes) {
  constexpr size_t kPage = 4096;
  void* p = std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage);
  ANVIL_ENSURE(p, kOutOfMemory, name(), ": cannot allocate ", bytes, " bytes of host memory");
  return p;
}

void Runtime::release_host_impl(void* p) { std::free(p); }

Runtime::MemoryStats Runtime::memory_stats() const {
  MemoryStats m = stats_;
  m.capacity = memory_capacity();
  return m;
}

void Runtime::upload(Tensor dst, const void* host_src) {
  checks_of(*this, "upload").tensor("dst", dst, dst.dtype);
  upload_impl(dst, host_src);
}

void Runtime::download(void* host_dst, Tensor src) {
  checks_of(*this, "download").tensor("src", src, src.dtype);
  download_impl(host_dst, src);
}

void Runtime::copy_to_host(void* host_dst, Tensor src, int slot) {
  checks_of(*this, "copy_to_host").tensor("src", src, src.dtype);
  ANVIL_ENSURE(slot >= 0, kInternal, "copy_to_host: event slot ", slot);
  copy_to_host_impl(host_dst, src, slot);
}

void Runtime::copy_to_device(Tensor dst, const void* host_src, int slot) {
  checks_of(*this, "copy_to_device").tensor("dst", dst, dst.dtype);
  ANVIL_ENSURE(slot >= 0, kInternal, "copy_to_device: event slot ", slot);
  copy_to_device_impl(dst, host_src, slot);
}

void Runtime::copy_to_host_impl(void* host_dst, Tensor src, int slot) {
  (void)slot;
  download_impl(host_dst, src);
}

void Runtime::copy_to_device_impl(Tensor dst, const void* host_src, int slot) {
  (void)slot;
  upload_impl(dst, host_src);
}

void Runtime::zero(Tensor t) {
  checks_of(*this, "zero").tensor("t", t, t.dtype);
  const OpScope scope(*this, "zero", [&] { return cat(t.bytes(), " bytes"); });
  zero_impl(t);
}

void Runtime::convert(Tensor dst, Tensor src) {
  const OpChecks c = checks_of(*this, "convert");
  c.tensor("src", src, src.dtype).tensor("dst", dst, dst.dtype, src.numel());
  const bool f32_bf16 = (dst.dtype == DType::kF32 || dst.dtype == DType::kBF16) &&
                        (src.dtype == DType::kF32 || src.dtype == DType::kBF16);
  c.ensure(dst.dtype == src.dtype || f32_bf16, dtype_name(src.dtype), " to ", dtype_name(dst.dtype),
           " is not supported (F32 <-> BF16 only)");
  const OpScope scope(*this, "convert",
                      [&] { return cat(dtype_name(src.dtype), "->", dtype_name(dst.dtype), " ", src.numel()); });
  convert_impl(dst, src);
}

void Runtime::copy_rows(Tensor out, int64_t out_pitch, Tensor in, int64_t in_pitch, int64_t rows, int64_t width) {
  const OpChecks c = checks_of(*this, "copy_rows");
  c.tensor("in", in, in.dtype).tensor("out", out, in.dtype);
  c.ensure(rows >= 0 && width >= 0 && width <= in_pitch && width <= out_pitch, rows, " rows of ", width,
           " elements at pitches ", in_pitch, " (in) and ", out_pitch, " (out)");
  c.ensure(rows == 0 || ((rows - 1) * in_pitch + width <= in.numel() && (rows - 1) * out_pitch + width <= out.numel()),
           rows, " rows of ", width, " at pitches ", in_pitch, " and ", out_pitch, " pass the end of in (", in.numel(),
           ") or out (", out.numel(), ")");
  const OpScope scope(*this, "copy_rows", [&] { return cat(rows, "x", width); });
  if (rows > 0 && width > 0) copy_rows_impl(out, out_pitch, in, in_pitch, rows, width);
}

}  // namespace anvil
