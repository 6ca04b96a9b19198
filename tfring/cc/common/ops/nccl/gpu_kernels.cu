#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "gpu_kernels.h"

namespace tfring {
namespace {

// Per-element conversion through float/double so half, bfloat16 and integers share one kernel body.
template <typename T> struct Conv {
  __device__ static double To(T v) { return static_cast<double>(v); }
  __device__ static T From(double v) { return static_cast<T>(v); }
};
template <> struct Conv<__half> {
  __device__ static double To(__half v) { return __half2float(v); }
  __device__ static __half From(double v) { return __float2half(static_cast<float>(v)); }
};
template <> struct Conv<__nv_bfloat16> {
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

template <typename T>
void Scale(void* d, int64_t n, double f, cudaStream_t s) {
  ScaleKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<T*>(d), n, f);
}

template <typename T>
void Divide(void* d, int64_t n, int div, cudaStream_t s) {
  DivideKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<T*>(d), n, div);
}

}  // namespace

Status GpuScale(void* data, int64_t n, DataType dtype, double f, void* stream) {
  if (f == 1.0 || n == 0) return Status::OK();
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DataType::UINT8: Scale<uint8_t>(data, n, f, s); break;
    case DataType::INT8: Scale<int8_t>(data, n, f, s); break;
    case DataType::UINT16: Scale<uint16_t>(data, n, f, s); break;
    case DataType::INT16: Scale<int16_t>(data, n, f, s); break;
    case DataType::INT32: Scale<int32_t>(data, n, f, s); break;
    case DataType::INT64: Scale<int64_t>(data, n, f, s); break;
    case DataType::FLOAT32:
      ScaleFloatKernel<<<Blocks(n), kThreads, 0, s>>>(static_cast<float*>(data), n, static_cast<float>(f));
      break;
    case DataType::FLOAT64: Scale<double>(data, n, f, s); break;
    case DataType::FLOAT16: Scale<__half>(data, n, f, s); break;
    case DataType::BFLOAT16: Scale<__nv_bfloat16>(data, n, f, s); break;
    case DataType::BOOL: return Status::OK();
  }
  return LaunchStatus("the scale kernel");
}

Status GpuDivide(void* data, int64_t n, DataType dtype, int d, void* stream) {
  if (d == 1 || n == 0) return Status::OK();
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DataType::UINT8: Divide<uint8_t>(data, n, d, s); break;
    case DataType::INT8: Divide<int8_t>(data, n, d, s); break;
    case DataType::UINT16: Divide<uint16_t>(data, n, d, s); break;
    case DataType::INT16: Divide<int16_t>(data, n, d, s); break;
    case DataType::INT32: Divide<int32_t>(data, n, d, s); break;
    case DataType::INT64: Divide<int64_t>(data, n, d, s); break;
    case DataType::FLOAT32: Divide<float>(data, n, d, s); break;
    case DataType::FLOAT64: Divide<double>(data, n, d, s); break;
    case DataType::FLOAT16:
      Divide16Kernel<__half><<<Blocks(n), kThreads, 0, s>>>(static_cast<__half*>(data), n, d);
      break;
    case DataType::BFLOAT16:
      Divide16Kernel<__nv_bfloat16><<<Blocks(n), kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(data), n, d);
      break;
    case DataType::BOOL: return Status::OK();
  }
  return LaunchStatus("the divide kernel");
}

}  // namespace tfring
