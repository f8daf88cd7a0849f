// FP8 numbers on the host: the two formats of Hopper's FP8 tensor cores, and the casts
// between them and float, the reference that the FP8 recipe's CPU emulation and its GPU
// kernels are tested against (ops/fp8_recipe.h).
//
// E4M3 is float8_e4m3fn (4 exponent bits, bias 7, 3 mantissa bits, no infinities: 0x7f is
// NaN, the largest finite value 448); E5M2 is float8_e5m2 (5 exponent bits, bias 15, 2
// mantissa bits, IEEE-like: infinities and NaNs, the largest finite value 57344).
// float -> fp8 rounds to nearest, ties to even, with subnormals, bit for bit as PyTorch's
// casts to torch.float8_e4m3fn / torch.float8_e5m2: a value that rounds past the largest
// finite one becomes NaN (E4M3, which has no infinity) or infinity (E5M2), NaN stays NaN
// (0x7f, 0xff in E4M3; 0x7f, 0xff in E5M2, with the input's sign). fp8 -> float is exact.
// fp8_saturate clamps to +-max first (NaN stays NaN), as torchao's to_fp8_saturated does
// before its cast: what the recipe uses.
#pragma once

#include <cstdint>

namespace anvil {

enum class Fp8Format { kE4M3, kE5M2 };

const char* fp8_format_name(Fp8Format f);  // "e4m3" | "e5m2"
float fp8_max(Fp8Format f);                // 448 | 57344

uint8_t f32_to_fp8_bits(float f, Fp8Format format);  // round to nearest even, not saturated
float fp8_bits_to_f32(uint8_t bits, Fp8Format format);
// The value clamped to [-fp8_max, fp8_max] (NaN unchanged), then cast: never NaN from a
// finite input, never infinite.
uint8_t f32_to_fp8_bits_saturated(float f, Fp8Format format);

}  // namespace anvil
