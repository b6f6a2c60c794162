// IEEE 754 binary16 ("half", FP16) conversions, for swapped tensors that travel compressed
// (LDFG): an fp32 tensor crosses the host link as fp16, half the bytes each way, and comes
// back as fp32(fp16(x)). Lossy, so opt-in (MEMWEAVE_SCHEDULE_COMPRESS=fp16) and never the
// default.
//
// Written with integer bit operations rather than `_Float16` (a GCC/Clang extension on some
// targets only; C++20 has no std::float16_t): the same results everywhere, and the same as
// CUDA's __float2half_rn / __half2float, so a checksum of the fp16 bytes computed on the host
// matches one of bytes a device kernel produced.
//
// Rounding: round to nearest, ties to even. Overflow: finite values of magnitude >= 65520
// become +-inf (IEEE, as CUDA does; not saturated to 65504: an overflow then shows as inf in
// the round-trip error statistic instead of passing silently). Values below half the
// smallest fp16 subnormal (2^-25) become +-0; fp32 subnormals all do. NaN stays NaN (its top
// payload bits kept, the quiet bit set when the kept payload would be 0); infinities stay.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memweave {

/// fp16 bits of `x`, rounded to nearest even.
std::uint16_t fp16_from_float(float x) noexcept;
/// The fp32 value of fp16 bits `h` (exact: every fp16 value is an fp32 value).
float float_from_fp16(std::uint16_t h) noexcept;

/// The largest relative error of a round trip is measured against max(|x|, this): the
/// smallest normal fp16 (2^-14). Below it fp16 is fixed-point (absolute error <= 2^-25), so
/// the relative error of every finite value within range stays <= 2^-11 (half an ulp).
inline constexpr float fp16_error_floor = 6.103515625e-05f;

/// Largest relative error of fp16's rounding for a value within range (2^-11).
inline constexpr double fp16_max_relative_error = 1.0 / 2048.0;

/// dst[i] = fp16(src[i]) for i in [0, count); returns max |x - fp32(fp16(x))| / max(|x|,
/// fp16_error_floor) over the finite values (+inf when one overflowed; NaN and infinities are
/// not counted). Safe in place (dst == src as bytes): writing the 2-byte element i, in
/// ascending order, touches bytes [2i, 2i + 2), which lie inside the 4-byte elements i/2 <= i
/// already read, never one still to be read.
double fp16_encode(std::uint16_t* dst, const float* src, std::size_t count) noexcept;

/// dst[i] = fp32(src[i]) for i in [0, count). Safe in place (src at the start of dst's
/// bytes): in descending order, writing the 4-byte element i covers bytes [4i, 4i + 4),
/// which hold the 2-byte elements 2i and 2i + 1 >= i: already read, since i only decreases
/// (for i = 0 it overwrites element 0 after reading it).
void fp16_decode(float* dst, const std::uint16_t* src, std::size_t count) noexcept;

}  // namespace memweave
