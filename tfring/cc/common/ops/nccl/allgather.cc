#include "../layout.h"
#include "collectives.h"

namespace tfring {

Status NcclAllgather(NcclComm& c, const Response& r, GpuEntries& entries) {
  TensorEntry& e = entries[0];
  Shape trailing(r.shape.size() > 1 ? r.shape.begin() + 1 : r.shape.end(), r.shape.end());
  const int64_t row_bytes = NumElements(trailing) * DataTypeSize(r.dtype);
  const std::vector<int64_t> displs = Offsets(r.sizes);
  const int64_t rows = displs.back() + r.sizes.back();
  Shape out_shape = {rows};
  out_shape.insert(out_shape.end(), trailing.begin(), trailing.end());
  TFR_RETURN_IF_ERROR(e.context->AllocateOutput(e.output_index, out_shape, &e.output));
  if (rows == 0 || row_bytes == 0) return Status::OK();
  TFR_RETURN_IF_ERROR(c.WaitForFrameworkStream(e.gpu_stream));  // the new output may still be in use there
  char* out = static_cast<char*>(e.output->data());
  bool even = true;
  for (int64_t s : r.sizes) even = even && s == r.sizes[0];
  if (even) {
    TFR_NCCL(c, ncclAllGather(e.input->data(), out, r.sizes[0] * row_bytes, ncclUint8, c.comm, c.stream));
    return Status::OK();
  }
  // Ragged first dimensions: every rank broadcasts its part into place, fused into one NCCL group.
  TFR_NCCL(c, ncclGroupStart());
  for (int i = 0; i < c.size; ++i) {
    ncclResult_t res = ncclBroadcast(e.input->data(), out + displs[i] * row_bytes, r.sizes[i] * row_bytes, ncclUint8, i,
                                     c.comm, c.stream);
    if (res != ncclSuccess) {
      ncclGroupEnd();
      TFR_NCCL(c, res);
    }
  }
  TFR_NCCL(c, ncclGroupEnd());
  return Status::OK();
}

}  // namespace tfring
