// Element-wise CUDA kernels for prescale/postscale and Average's division, enqueued on the backend's stream.
// Same semantics as the CPU versions in ../scale.h (integers truncate; floats divide rather than multiply by 1/n).
#pragma once
#include <cstdint>

#include "../../status.h"
#include "../../types.h"

namespace tfring {

Status GpuScale(void* data, int64_t count, DataType dtype, double factor, void* stream);
Status GpuDivide(void* data, int64_t count, DataType dtype, int divisor, void* stream);
// ../scale.h FinishReduction on the GPU: postscale, then Average's division (one rounding for 16-bit floats).
Status GpuFinishReduction(void* data, int64_t count, DataType dtype, double postscale, int divisor, void* stream);

}  // namespace tfring
