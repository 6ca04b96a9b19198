#include "collectives.h"

namespace tfring {

Status NcclAlltoall(NcclComm& c, const Response& r, GpuEntries& entries) {
  TensorEntry& e = entries[0];
  const int n = c.size, me = c.rank;
  Shape trailing(r.shape.size() > 1 ? r.shape.begin() + 1 : r.shape.end(), r.shape.end());
  const int64_t row_bytes = NumElements(trailing) * DataTypeSize(r.dtype);
  // r.sizes is the split matrix: row s = rows rank s sends to each rank.
  int64_t received_rows = 0;
  for (int i = 0; i < n; ++i) received_rows += r.sizes[i * n + me];
  Shape out_shape = {received_rows};
  out_shape.insert(out_shape.end(), trailing.begin(), trailing.end());
  TFR_RETURN_IF_ERROR(e.context->AllocateOutput(e.output_index, out_shape, &e.output));
  std::shared_ptr<Tensor> received;  // host memory (the kernel declares it HostMemory)
  TFR_RETURN_IF_ERROR(e.context->AllocateOutput(e.extra_output_index, {n}, &received));
  TFR_RETURN_IF_ERROR(c.WaitForFrameworkStream(e.gpu_stream));  // the new output may still be in use there
  int32_t* rs = static_cast<int32_t*>(received->data());
  for (int i = 0; i < n; ++i) rs[i] = static_cast<int32_t>(r.sizes[i * n + me]);
  if (row_bytes == 0) return Status::OK();
  const char* in = static_cast<const char*>(e.input->data());
  char* out = static_cast<char*>(e.output->data());
  TFR_NCCL(c, ncclGroupStart());
  int64_t soff = 0, roff = 0;
  ncclResult_t res = ncclSuccess;
  for (int peer = 0; peer < n && res == ncclSuccess; ++peer) {
    const int64_t sbytes = r.sizes[me * n + peer] * row_bytes, rbytes = r.sizes[peer * n + me] * row_bytes;
    if (sbytes > 0) res = ncclSend(in + soff, sbytes, ncclUint8, peer, c.comm, c.stream);
    if (res == ncclSuccess && rbytes > 0) res = ncclRecv(out + roff, rbytes, ncclUint8, peer, c.comm, c.stream);
    soff += sbytes;
    roff += rbytes;
  }
  ncclResult_t end = ncclGroupEnd();
  TFR_NCCL(c, res);
  TFR_NCCL(c, end);
  return Status::OK();
}

}  // namespace tfring
