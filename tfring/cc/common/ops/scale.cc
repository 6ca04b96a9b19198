#include "scale.h"

#include "../half.h"

namespace tfring {
namespace {

template <typename T>
void ScaleAs(void* data, int64_t n, double f) {
  T* p = static_cast<T*>(data);
  // Integers are scaled in double and truncated toward zero, like C's conversion.
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] * f);
}

template <void (*Widen)(const uint16_t*, float*, int64_t), void (*Narrow)(const float*, uint16_t*, int64_t)>
void Scale16(void* data, int64_t n, double f) {
  // In double, then rounded once to float and once to 16 bits, as before blocks.
  Blockwise16<Widen, Narrow>(static_cast<uint16_t*>(data), nullptr, n, [f](float* x, const float*, int64_t m) {
    for (int64_t i = 0; i < m; ++i) x[i] = static_cast<float>(x[i] * f);
  });
}

template <typename T>
void DivideAs(void* data, int64_t n, int d) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(d));
}

// Average of floating-point tensors: x / d, exactly as numpy's sum / n. Scalar division cost 40 ms per 100 MB
// here, more than the collective; blocks of 16 let the compiler emit vector divisions (SLP at -O2), and a
// power-of-two d multiplies by its reciprocal, which is exact (the same correctly rounded value as the division).
template <typename T>
void DivideFloat(void* data, int64_t n, int d) {
  T* p = static_cast<T*>(data);
  const T dd = static_cast<T>(d);
  int64_t i = 0;
  if ((d & (d - 1)) == 0) {
    const T r = static_cast<T>(1) / dd;
    for (; i + 16 <= n; i += 16)
      for (int j = 0; j < 16; ++j) p[i + j] *= r;
  } else {
    for (; i + 16 <= n; i += 16)
      for (int j = 0; j < 16; ++j) p[i + j] /= dd;
  }
  for (; i < n; ++i) p[i] /= dd;
}

template <void (*Widen)(const uint16_t*, float*, int64_t), void (*Narrow)(const float*, uint16_t*, int64_t)>
void Divide16(void* data, int64_t n, int d) {
  Blockwise16<Widen, Narrow>(static_cast<uint16_t*>(data), nullptr, n, [d](float* x, const float*, int64_t m) {
    for (int64_t i = 0; i < m; ++i) x[i] /= static_cast<float>(d);
  });
}

}  // namespace

void DivideBuffer(void* data, int64_t n, DataType dtype, int d) {
  if (d == 1 || n == 0) return;
  switch (dtype) {
    case DataType::UINT8:
      DivideAs<uint8_t>(data, n, d);
      break;
    case DataType::INT8:
      DivideAs<int8_t>(data, n, d);
      break;
    case DataType::UINT16:
      DivideAs<uint16_t>(data, n, d);
      break;
    case DataType::INT16:
      DivideAs<int16_t>(data, n, d);
      break;
    case DataType::INT32:
      DivideAs<int32_t>(data, n, d);
      break;
    case DataType::INT64:
      DivideAs<int64_t>(data, n, d);
      break;
    case DataType::FLOAT32:
      DivideFloat<float>(data, n, d);
      break;
    case DataType::FLOAT64:
      DivideFloat<double>(data, n, d);
      break;
    case DataType::FLOAT16:
      Divide16<HalvesToFloats, FloatsToHalves>(data, n, d);
      break;
    case DataType::BFLOAT16:
      Divide16<Bf16sToFloats, FloatsToBf16s>(data, n, d);
      break;
    case DataType::BOOL:
      break;
  }
}

bool CombinedScale(DataType dtype, double postscale, int divisor) {
  return (dtype == DataType::FLOAT16 || dtype == DataType::BFLOAT16) && divisor > 1 && postscale != 1.0;
}

void FinishReduction(void* data, int64_t n, DataType dtype, double postscale, int divisor) {
  if (CombinedScale(dtype, postscale, divisor)) return ScaleBuffer(data, n, dtype, postscale / divisor);
  ScaleBuffer(data, n, dtype, postscale);
  if (divisor > 1) DivideBuffer(data, n, dtype, divisor);
}

void ScaleBuffer(void* data, int64_t n, DataType dtype, double f) {
  if (f == 1.0 || n == 0) return;
  switch (dtype) {
    case DataType::UINT8:
      ScaleAs<uint8_t>(data, n, f);
      break;
    case DataType::INT8:
      ScaleAs<int8_t>(data, n, f);
      break;
    case DataType::UINT16:
      ScaleAs<uint16_t>(data, n, f);
      break;
    case DataType::INT16:
      ScaleAs<int16_t>(data, n, f);
      break;
    case DataType::INT32:
      ScaleAs<int32_t>(data, n, f);
      break;
    case DataType::INT64:
      ScaleAs<int64_t>(data, n, f);
      break;
    case DataType::FLOAT32: {
      float* p = static_cast<float*>(data);
      const float ff = static_cast<float>(f);
      for (int64_t i = 0; i < n; ++i) p[i] *= ff;
      break;
    }
    case DataType::FLOAT64:
      ScaleAs<double>(data, n, f);
      break;
    case DataType::FLOAT16:
      Scale16<HalvesToFloats, FloatsToHalves>(data, n, f);
      break;
    case DataType::BFLOAT16:
      Scale16<Bf16sToFloats, FloatsToBf16s>(data, n, f);
      break;
    case DataType::BOOL:
      break;
  }
}

}  // namespace tfring
