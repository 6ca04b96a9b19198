#include "collectives.h"

namespace tfring {

Status NcclBroadcast(NcclComm& c, const Response& r, GpuEntries& entries) {
  TensorEntry& e = entries[0];
  const int64_t bytes = e.output->size_bytes();
  if (c.rank == r.root_rank) TFR_RETURN_IF_ERROR(CopyOnStream(c, e.output->data(), e.input->data(), bytes));
  if (bytes == 0) return Status::OK();
  TFR_NCCL(c, ncclBroadcast(e.output->data(), e.output->data(), bytes, ncclUint8, r.root_rank, c.comm, c.stream));
  return Status::OK();
}

}  // namespace tfring
