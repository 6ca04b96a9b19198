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

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void Scale16(void* data, int64_t n, double f) {
  uint16_t* p = static_cast<uint16_t*>(data);
  for (int64_t i = 0; i < n; ++i) p[i] = FromF(static_cast<float>(ToF(p[i]) * f));
}

template <typename T>
void DivideAs(void* data, int64_t n, int d) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(d));
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void Divide16(void* data, int64_t n, int d) {
  uint16_t* p = static_cast<uint16_t*>(data);
  for (int64_t i = 0; i < n; ++i) p[i] = FromF(ToF(p[i]) / static_cast<float>(d));
}

}  // namespace

void DivideBuffer(void* data, int64_t n, DataType dtype, int d) {
  if (d == 1 || n == 0) return;
  switch (dtype) {
    case DataType::UINT8: DivideAs<uint8_t>(data, n, d); break;
    case DataType::INT8: DivideAs<int8_t>(data, n, d); break;
    case DataType::UINT16: DivideAs<uint16_t>(data, n, d); break;
    case DataType::INT16: DivideAs<int16_t>(data, n, d); break;
    case DataType::INT32: DivideAs<int32_t>(data, n, d); break;
    case DataType::INT64: DivideAs<int64_t>(data, n, d); break;
    case DataType::FLOAT32: DivideAs<float>(data, n, d); break;
    case DataType::FLOAT64: DivideAs<double>(data, n, d); break;
    case DataType::FLOAT16: Divide16<HalfToFloat, FloatToHalf>(data, n, d); break;
    case DataType::BFLOAT16: Divide16<Bf16ToFloat, FloatToBf16>(data, n, d); break;
    case DataType::BOOL: break;
  }
}

void ScaleBuffer(void* data, int64_t n, DataType dtype, double f) {
  if (f == 1.0 || n == 0) return;
  switch (dtype) {
    case DataType::UINT8: ScaleAs<uint8_t>(data, n, f); break;
    case DataType::INT8: ScaleAs<int8_t>(data, n, f); break;
    case DataType::UINT16: ScaleAs<uint16_t>(data, n, f); break;
    case DataType::INT16: ScaleAs<int16_t>(data, n, f); break;
    case DataType::INT32: ScaleAs<int32_t>(data, n, f); break;
    case DataType::INT64: ScaleAs<int64_t>(data, n, f); break;
    case DataType::FLOAT32: {
      float* p = static_cast<float*>(data);
      const float ff = static_cast<float>(f);
      for (int64_t i = 0; i < n; ++i) p[i] *= ff;
      break;
    }
    case DataType::FLOAT64: ScaleAs<double>(data, n, f); break;
    case DataType::FLOAT16: Scale16<HalfToFloat, FloatToHalf>(data, n, f); break;
    case DataType::BFLOAT16: Scale16<Bf16ToFloat, FloatToBf16>(data, n, f); break;
    case DataType::BOOL: break;
  }
}

}  // namespace tfring
