// float16 / bfloat16 <-> float conversions for reductions MPI has no type for.
#pragma once
#include <cstdint>
#include <cstring>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TFRING_F16C 1
#endif

namespace tfring {

inline float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FloatToHalf(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0);  // inf / nan
  if (absx >= 0x477ff000u) return sign | 0x7c00u;                                      // overflow -> inf
  if (absx < 0x38800000u) {                                                            // subnormal or zero
    if (absx < 0x33000000u) return sign;
    uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;  // 14 + (113 - e) - ... : brings m to half subnormal precision
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return sign | r;
  }
  uint32_t r = absx - 0x38000000u;  // rebias exponent 127 -> 15
  uint32_t out = r >> 13, rem = r & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (out & 1))) ++out;
  return sign | out;
}

inline float Bf16ToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40;  // quiet nan
  x += 0x7fff + ((x >> 16) & 1);
  return x >> 16;
}

// Bulk conversions for the reductions and scalings of float16/bfloat16 buffers: a block is widened to float, worked
// on, and narrowed back. The scalar float16 conversions above cost ~15 ns per element (fp16 compression made a
// 100 MB training step 4.6x slower than none, benchmarks/compression.py); F16C converts 8 at a time where the CPU
// has it, rounding to nearest even as FloatToHalf does (the same bits, NaN payloads aside).
#ifdef TFRING_F16C
__attribute__((target("avx,f16c"))) inline void HalvesToFloatsF16C(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

__attribute__((target("avx,f16c"))) inline void FloatsToHalvesF16C(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

inline bool HasF16C() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}
#endif

inline void HalvesToFloats(const uint16_t* in, float* out, int64_t n) {
#ifdef TFRING_F16C
  if (HasF16C()) return HalvesToFloatsF16C(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

inline void FloatsToHalves(const float* in, uint16_t* out, int64_t n) {
#ifdef TFRING_F16C
  if (HasF16C()) return FloatsToHalvesF16C(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

// bfloat16: the scalar conversions' arithmetic on 32-bit integers without branches, which the compiler vectorizes
// (the scalar ones, with their NaN branch and memcpy, ran one element at a time: bf16 compression cost 1.9x none).
inline void Bf16sToFloats(const uint16_t* in, float* out, int64_t n) {
  uint32_t bits[512];
  for (int64_t i = 0; i < n; i += 512) {
    const int64_t m = n - i < 512 ? n - i : 512;
    for (int64_t j = 0; j < m; ++j) bits[j] = uint32_t(in[i + j]) << 16;
    std::memcpy(out + i, bits, m * sizeof(float));
  }
}

inline void FloatsToBf16s(const float* in, uint16_t* out, int64_t n) {
  uint32_t bits[512];
  for (int64_t i = 0; i < n; i += 512) {
    const int64_t m = n - i < 512 ? n - i : 512;
    std::memcpy(bits, in + i, m * sizeof(float));
    for (int64_t j = 0; j < m; ++j) {
      const uint32_t x = bits[j];
      const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16, quiet_nan = (x >> 16) | 0x40u;
      out[i + j] = static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
    }
  }
}

// Applies fn(float* x, const float* y, int64_t n) blockwise to the widened values of `inout` (x, written back)
// and `in` (y; nullptr: none).
template <void (*Widen)(const uint16_t*, float*, int64_t), void (*Narrow)(const float*, uint16_t*, int64_t),
          typename Fn>
inline void Blockwise16(uint16_t* inout, const uint16_t* in, int64_t n, Fn fn) {
  constexpr int64_t kBlock = 512;
  float x[kBlock], y[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = n - i < kBlock ? n - i : kBlock;
    Widen(inout + i, x, m);
    if (in != nullptr) Widen(in + i, y, m);
    fn(x, y, m);
    Narrow(x, inout + i, m);
  }
}

}  // namespace tfring
