#include <cuda_runtime_api.h>

#include <string>

#include "../gpu_backend.h"

namespace tfring {

Status GpuMalloc(int device, int64_t bytes, void** out) {
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  cudaError_t err = cudaMalloc(out, bytes > 0 ? bytes : 1);
  cudaSetDevice(previous);
  if (err != cudaSuccess) return Status::Unknown(std::string("tfring: cudaMalloc failed: ") + cudaGetErrorString(err));
  return Status::OK();
}

void GpuFree(void* p) { cudaFree(p); }

Status GpuCopyHostToDevice(void* dst, const void* src, int64_t bytes, void* stream) {
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess)
    return Status::Unknown(std::string("tfring: cudaMemcpyAsync failed: ") + cudaGetErrorString(err));
  return Status::OK();
}

}  // namespace tfring
