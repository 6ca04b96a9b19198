#include <algorithm>
#include <vector>

#include "../layout.h"
#include "../scale.h"
#include "collectives.h"

namespace tfring {

Status MpiReducescatter(MpiContext& ctx, const Response& r, const Entries& entries) {
  TensorEntry* e = entries[0];
  const int n = ctx.size;
  const int64_t dim0 = r.shape[0];
  const int64_t row_elems = NumElements(r.shape) / (dim0 ? dim0 : 1);
  const std::vector<int64_t> rows = EvenRowCounts(dim0, n);
  std::vector<int> counts(n);
  for (int i = 0; i < n; ++i)
    TFR_RETURN_IF_ERROR(ToIntCount(ctx, rows[i] * row_elems, "reducescatter count", &counts[i]));
  Shape out_shape = r.shape;
  out_shape[0] = rows[ctx.rank];
  TFR_RETURN_IF_ERROR(e->context->AllocateOutput(e->output_index, out_shape, &e->output));
  const int64_t total = NumElements(r.shape), esize = DataTypeSize(r.dtype);
  if (total == 0) return Status::OK();
  const char* in = static_cast<const char*>(e->input->data());
  char* out = static_cast<char*>(e->output->data());
  auto ensure = [&](int64_t bytes) {
    if (static_cast<int64_t>(ctx.fusion_buffer.size()) < bytes) ctx.fusion_buffer.resize(bytes);
  };
  if (r.prescale != 1.0) {  // scaled in a copy: the caller's input stays as it was
    ensure(total * esize);
    std::copy_n(in, total * esize, ctx.fusion_buffer.data());
    ScaleBuffer(ctx.fusion_buffer.data(), total, r.dtype, r.prescale);
    in = ctx.fusion_buffer.data();
  }
  if (total * esize >= kRingBytes && n > 1) {  // ring.cc: Open MPI's reduce-scatter is 4-6x slower here
    const std::vector<int64_t> elems(counts.begin(), counts.end()), displs = Offsets(elems);
    if (in == ctx.fusion_buffer.data()) {  // the scaled copy is ours: reduce in place, then take this rank's block
      TFR_RETURN_IF_ERROR(RingReduceScatter(ctx, r, ctx.fusion_buffer.data(), elems, displs, ctx.comm));
      std::copy_n(ctx.fusion_buffer.data() + displs[ctx.rank] * esize, elems[ctx.rank] * esize, out);
    } else {  // read the input where it is (100 MB at np=2: 35 -> 18 ms without the whole copy)
      ensure((n > 3 ? 2 : n - 2) * *std::max_element(elems.begin(), elems.end()) * esize);
      TFR_RETURN_IF_ERROR(RingReduceScatter(ctx, r, ctx.fusion_buffer.data(), elems, displs, ctx.comm, in, out));
    }
  } else {
    TFR_CHECK_MPI(
        MPI_Reduce_scatter(in, out, counts.data(), ctx.Type(r.dtype), ctx.Op(r.reduce_op, r.dtype), ctx.comm));
  }
  FinishReduction(e->output->data(), counts[ctx.rank], r.dtype, r.postscale, r.reduce_op == ReduceOp::AVERAGE ? n : 1);
  return Status::OK();
}

}  // namespace tfring
