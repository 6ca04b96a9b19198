#include <cstring>

#include "collectives.h"

namespace tfring {

Status MpiAlltoall(MpiContext& ctx, const Response& r, const Entries& entries) {
  TensorEntry* e = entries[0];
  const int n = ctx.size;
  Shape trailing(r.shape.size() > 1 ? r.shape.begin() + 1 : r.shape.end(), r.shape.end());
  const int64_t row_bytes = NumElements(trailing) * DataTypeSize(r.dtype);
  // r.sizes is the split matrix: row s = rows rank s sends to each rank.
  // Check the whole matrix, not just this rank's row and column: every rank must reach the same verdict, or
  // the ranks that passed would enter MPI_Alltoallv without the others.
  for (int s = 0; s < n; ++s) {
    int64_t sent = 0, received = 0;
    for (int d = 0; d < n; ++d) sent += r.sizes[s * n + d], received += r.sizes[d * n + s];
    int unused;
    TFR_RETURN_IF_ERROR(ToIntCount(ctx, sent, "alltoall rows sent by one rank", &unused));
    TFR_RETURN_IF_ERROR(ToIntCount(ctx, received, "alltoall rows received by one rank", &unused));
  }
  std::vector<int> scounts(n), sdispls(n), rcounts(n), rdispls(n);
  int64_t soff = 0, roff = 0;
  for (int i = 0; i < n; ++i) {
    TFR_RETURN_IF_ERROR(ToIntCount(ctx, r.sizes[ctx.rank * n + i], "alltoall send rows", &scounts[i]));
    TFR_RETURN_IF_ERROR(ToIntCount(ctx, r.sizes[i * n + ctx.rank], "alltoall receive rows", &rcounts[i]));
    TFR_RETURN_IF_ERROR(ToIntCount(ctx, soff, "alltoall offset", &sdispls[i]));
    TFR_RETURN_IF_ERROR(ToIntCount(ctx, roff, "alltoall offset", &rdispls[i]));
    soff += scounts[i];
    roff += rcounts[i];
  }
  Shape out_shape = {roff};
  out_shape.insert(out_shape.end(), trailing.begin(), trailing.end());
  TFR_RETURN_IF_ERROR(e->context->AllocateOutput(e->output_index, out_shape, &e->output));
  std::shared_ptr<Tensor> received;
  TFR_RETURN_IF_ERROR(e->context->AllocateOutput(e->extra_output_index, {n}, &received));
  int32_t* rs = static_cast<int32_t*>(received->data());
  for (int i = 0; i < n; ++i) rs[i] = rcounts[i];
  if (row_bytes == 0) return Status::OK();
  RowType row(row_bytes);
  TFR_CHECK_MPI(MPI_Alltoallv(e->input->data(), scounts.data(), sdispls.data(), row.get(), e->output->data(),
                              rcounts.data(), rdispls.data(), row.get(), ctx.comm));
  return Status::OK();
}

}  // namespace tfring
