#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "../scale.h"
#include "gpu_kernels.h"

namespace tfring {
namespace {

// Per-element conversion through float/double so half, bfloat16 and integers share one kernel body.
template <typename T>
struct Conv {
  __device__ static double To(T v) { return static_cast<double>(v); }
  __device__ static T From(double v) { return static_cast<T>(v); }
};
template <>
struct Conv<__half> {
  __device__ static double To(__half v) { return __half2float(v); }
  __device__ static __half From(double v) { return __float2half(static_cast<float>(v)); }
};
template <>
struct Conv<__nv_bfloat16> {
  __device__ static double To(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 From(double v) { return __float2bfloat16(static_cast<float>(v)); }
};

template <typename T>
__global__ void ScaleKernel(T* p, int64_t n, double f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = Conv<T>::From(Conv<T>::To(p[i]) * f);
}

// float32 scales in float like the CPU path, so results match it bit for bit.
__global__ void ScaleFloatKernel(float* p, int64_t n, float f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] *= f;
}

template <typename T>
__global__ void DivideKernel(T* p, int64_t n, int d) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<T>(p[i] / static_cast<T>(d));
}

template <typename T>  // 16-bit floats divide in float, as on the CPU
__global__ void Divide16Kernel(T* p, int64_t n, int d) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = Conv<T>::From(static_cast<float>(Conv<T>::To(p[i])) / static_cast<float>(d));
}

constexpr int kThreads = 256;
int Blocks(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)); }

Status LaunchStatus(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::OK();
  return Status::Unknown(std::string("tfring: CUDA error launching ") + what + ": " + cudaGetErrorString(e));
}

// Calls f with the buffer typed by its dtype (bool: nothing to scale or divide).
template <typename F>
void ByDtype(void* d, DataType dtype, F f) {
  switch (dtype) {
    case DataType::UINT8:
      f(static_cast<uint8_t*>(d));
      break;
    case DataType::INT8:
      f(static_cast<int8_t*>(d));
      break;
    case DataType::UINT16:
      f(static_cast<uint16_t*>(d));
      break;
    case DataType::INT16:
      f(static_cast<int16_t*>(d));
      break;
    case DataType::INT32:
      f(static_cast<int32_t*>(d));
      break;
    case DataType::INT64:
      f(static_cast<int64_t*>(d));
      break;
    case DataType::FLOAT32:
      f(static_cast<float*>(d));
      break;
    case DataType::FLOAT64:
      f(static_cast<double*>(d));
      break;
    case DataType::FLOAT16:
      f(static_cast<__half*>(d));
      break;
    case DataType::BFLOAT16:
      f(static_cast<__nv_bfloat16*>(d));
      break;
    case DataType::BOOL:
      break;
  }
}

template <typename T>
constexpr bool kIs16BitFloat = std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;

}  // namespace

Status GpuScale(void* data, int64_t n, DataType dtype, double f, void* stream) {
  if (f == 1.0 || n == 0) return Status::OK();
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  ByDtype(data, dtype, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    if constexpr (std::is_same<T, float>::value)
      ScaleFloatKernel<<<Blocks(n), kThreads, 0, s>>>(p, n, static_cast<float>(f));
    else
      ScaleKernel<T><<<Blocks(n), kThreads, 0, s>>>(p, n, f);
  });
  return LaunchStatus("the scale kernel");
}

Status GpuDivide(void* data, int64_t n, DataType dtype, int d, void* stream) {
  if (d == 1 || n == 0) return Status::OK();
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  ByDtype(data, dtype, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    if constexpr (kIs16BitFloat<T>)
      Divide16Kernel<T><<<Blocks(n), kThreads, 0, s>>>(p, n, d);
    else
      DivideKernel<T><<<Blocks(n), kThreads, 0, s>>>(p, n, d);
  });
  return LaunchStatus("the divide kernel");
}

Status GpuFinishReduction(void* data, int64_t n, DataType dtype, double postscale, int divisor, void* stream) {
  if (CombinedScale(dtype, postscale, divisor)) return GpuScale(data, n, dtype, postscale / divisor, stream);
  TFR_RETURN_IF_ERROR(GpuScale(data, n, dtype, postscale, stream));
  return divisor > 1 ? GpuDivide(data, n, dtype, divisor, stream) : Status::OK();
}

}  // namespace tfring
