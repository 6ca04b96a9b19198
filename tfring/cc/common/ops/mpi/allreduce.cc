#include <climits>
#include <cstring>

#include "../../timeline.h"
#include "../scale.h"
#include "collectives.h"

namespace tfring {
namespace {

// MPI counts are int: reduce in chunks so tensors over 2^31 elements stay correct.
Status ReduceInPlace(MpiContext& ctx, const Response& r, char* buf, int64_t total) {
  TimelineActivity mpi(ctx.timeline, r.names, "MPI_ALLREDUCE");
  const int64_t esize = DataTypeSize(r.dtype), chunk = ctx.max_count;
  for (int64_t off = 0; off < total; off += chunk) {
    const int n = static_cast<int>(std::min(chunk, total - off));
    TFR_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buf + off * esize, n, ctx.Type(r.dtype), ctx.Op(r.reduce_op, r.dtype),
                                ctx.comm));
  }
  return Status::OK();
}

}  // namespace

Status MpiAllreduce(MpiContext& ctx, const Response& r, const Entries& entries) {
  const int64_t esize = DataTypeSize(r.dtype);
  int64_t total = 0;
  for (int64_t n : r.sizes) total += n;
  char* buf;
  const bool single = entries.size() == 1 && entries[0] != nullptr;
  if (single) {
    // Reduce straight in the output tensor; no fusion copy for a lone tensor.
    TensorEntry* e = entries[0];
    buf = static_cast<char*>(e->output->data());
    if (e->input->data() != buf) std::memcpy(buf, e->input->data(), total * esize);
  } else {
    TimelineActivity copy_in(ctx.timeline, r.names, "MEMCPY_IN_FUSION_BUFFER");
    if (static_cast<int64_t>(ctx.fusion_buffer.size()) < total * esize) ctx.fusion_buffer.resize(total * esize);
    buf = ctx.fusion_buffer.data();
    int64_t off = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      const int64_t bytes = r.sizes[i] * esize;
      if (entries[i]) std::memcpy(buf + off, entries[i]->input->data(), bytes);
      else std::memset(buf + off, 0, bytes);  // a joined rank contributes zeros
      off += bytes;
    }
  }
  ScaleBuffer(buf, total, r.dtype, r.prescale);
  TFR_RETURN_IF_ERROR(ReduceInPlace(ctx, r, buf, total));
  ScaleBuffer(buf, total, r.dtype, r.postscale);
  if (r.reduce_op == ReduceOp::AVERAGE) DivideBuffer(buf, total, r.dtype, ctx.size - r.joined);
  if (!single) {
    TimelineActivity copy_out(ctx.timeline, r.names, "MEMCPY_OUT_FUSION_BUFFER");
    int64_t off = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      const int64_t bytes = r.sizes[i] * esize;
      if (entries[i]) std::memcpy(entries[i]->output->data(), buf + off, bytes);
      off += bytes;
    }
  }
  return Status::OK();
}

}  // namespace tfring
