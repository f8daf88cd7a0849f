// bf16 and fp16 conversions on the host.
//
// float -> bf16 rounds to nearest, ties to even, as PyTorch and the CUDA intrinsics do;
// NaN stays NaN (the quiet bit is set so that rounding cannot turn a NaN into inf);
// +-inf, +-0 and denormals convert exactly as the rounding rule says. bf16 -> float is
// exact. fp16 conversions serve safetensors F16 tensors.
#pragma once

#include <bit>
#include <cstdint>

namespace anvil {

inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_bits_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// Round a float to the nearest bf16 value, kept as float.
inline float round_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

// A master weight as two 16-bit halves (parallel/param_store.h): hi, its bf16 value rounded
// to nearest with ties away from zero (the compute weight itself), and lo, the difference of
// its fp32 bits from hi's, which always lies in [-2^15, 2^15): join_master gives the fp32
// value back bit for bit. (Ties to even would need a 17th bit: a tie rounded down leaves
// +2^15.) Finite values only: a weight is never NaN or within half a bf16 step of FLT_MAX.
inline void split_master(float f, uint16_t* hi, int16_t* lo) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t h = (u + 0x8000u) >> 16;
  *hi = static_cast<uint16_t>(h);
  *lo = static_cast<int16_t>(static_cast<int32_t>(u - (h << 16)));
}
inline float join_master(uint16_t hi, int16_t lo) {
  return std::bit_cast<float>((static_cast<uint32_t>(hi) << 16) + static_cast<uint32_t>(static_cast<int32_t>(lo)));
}

struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(f32_to_bf16_bits(f)) {}
  explicit operator float() const { return bf16_bits_to_f32(bits); }
};
static_assert(sizeof(bf16) == 2);

float f16_bits_to_f32(uint16_t h);
uint16_t f32_to_f16_bits(float f);

}  // namespace anvil
