#include "../layout.h"
#include "collectives.h"
#include "gpu_kernels.h"

namespace tfring {

Status NcclReducescatter(NcclComm& c, const Response& r, GpuEntries& entries) {
  TensorEntry& e = entries[0];
  ncclDataType_t type;
  TFR_RETURN_IF_ERROR(NcclType(r.dtype, &type));
  const int n = c.size;
  const int64_t dim0 = r.shape[0];
  const int64_t row_elems = NumElements(r.shape) / (dim0 ? dim0 : 1);
  const std::vector<int64_t> rows = EvenRowCounts(dim0, n);
  Shape out_shape = r.shape;
  out_shape[0] = rows[c.rank];
  TFR_RETURN_IF_ERROR(e.context->AllocateOutput(e.output_index, out_shape, &e.output));
  TFR_RETURN_IF_ERROR(c.WaitForFrameworkStream(e.gpu_stream));  // the new output may still be in use there
  const int64_t total = NumElements(r.shape), esize = DataTypeSize(r.dtype);
  if (total == 0) return Status::OK();
  // Prescale works on a copy: the input tensor is not ours to modify.
  void* fusion;
  TFR_RETURN_IF_ERROR(c.FusionBuffer(total * esize, &fusion));
  char* buf = static_cast<char*>(fusion);
  TFR_RETURN_IF_ERROR(CopyOnStream(c, buf, e.input->data(), total * esize));
  TFR_RETURN_IF_ERROR(GpuScale(buf, total, r.dtype, r.prescale, c.stream));
  char* out = static_cast<char*>(e.output->data());
  const int64_t mine = rows[c.rank] * row_elems;
  if (dim0 % n == 0) {
    TFR_NCCL(c, ncclReduceScatter(buf, out, mine, type, NcclOp(r.reduce_op), c.comm, c.stream));
  } else {  // uneven rows: one reduce per destination rank, grouped
    const std::vector<int64_t> start = Offsets(rows);
    TFR_NCCL(c, ncclGroupStart());
    ncclResult_t res = ncclSuccess;
    for (int i = 0; i < n && res == ncclSuccess; ++i) {
      char* part = buf + start[i] * row_elems * esize;
      res = ncclReduce(part, i == c.rank ? static_cast<void*>(out) : static_cast<void*>(part), rows[i] * row_elems,
                       type, NcclOp(r.reduce_op), i, c.comm, c.stream);
    }
    ncclResult_t end = ncclGroupEnd();
    TFR_NCCL(c, res);
    TFR_NCCL(c, end);
  }
  TFR_RETURN_IF_ERROR(
      GpuFinishReduction(out, mine, r.dtype, r.postscale, r.reduce_op == ReduceOp::AVERAGE ? n : 1, c.stream));
  return Status::OK();
}

}  // namespace tfring
