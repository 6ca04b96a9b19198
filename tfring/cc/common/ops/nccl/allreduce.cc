#include "../layout.h"
#include "collectives.h"
#include "gpu_kernels.h"

namespace tfring {

Status CopyOnStream(NcclComm& c, void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return Status::OK();
  TFR_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c.stream));
  return Status::OK();
}

Status NcclAllreduce(NcclComm& c, const Response& r, GpuEntries& entries) {
  ncclDataType_t type;
  TFR_RETURN_IF_ERROR(NcclType(r.dtype, &type));
  const int esize = DataTypeSize(r.dtype);
  char* buf;
  int64_t count;
  FusionLayout layout;
  const bool single = entries.size() == 1;
  if (single) {  // reduce in the output tensor itself: no fusion copies for a lone tensor
    buf = static_cast<char*>(entries[0].output->data());
    count = r.sizes[0];
    TFR_RETURN_IF_ERROR(CopyOnStream(c, buf, entries[0].input->data(), count * esize));
  } else {
    layout = PlanFusionLayout(r.sizes, esize, 256);
    count = layout.total;
    void* fusion;
    TFR_RETURN_IF_ERROR(c.FusionBuffer(count * esize, &fusion));
    buf = static_cast<char*>(fusion);
    for (size_t i = 0; i < entries.size(); ++i)
      TFR_RETURN_IF_ERROR(
          CopyOnStream(c, buf + layout.offsets[i] * esize, entries[i].input->data(), r.sizes[i] * esize));
  }
  TFR_RETURN_IF_ERROR(GpuScale(buf, count, r.dtype, r.prescale, c.stream));
  TFR_NCCL(c, ncclAllReduce(buf, buf, count, type, NcclOp(r.reduce_op), c.comm, c.stream));
  TFR_RETURN_IF_ERROR(
      GpuFinishReduction(buf, count, r.dtype, r.postscale, r.reduce_op == ReduceOp::AVERAGE ? c.size : 1, c.stream));
  if (!single)
    for (size_t i = 0; i < entries.size(); ++i)
      TFR_RETURN_IF_ERROR(
          CopyOnStream(c, entries[i].output->data(), buf + layout.offsets[i] * esize, r.sizes[i] * esize));
  return Status::OK();
}

}  // namespace tfring
