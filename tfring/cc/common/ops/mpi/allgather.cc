#include "collectives.h"

namespace tfring {

Status MpiAllgather(MpiContext& ctx, const Response& r, const Entries& entries) {
  TensorEntry* e = entries[0];
  // Scalars gather like shape [1], giving a vector of one value per rank.
  Shape trailing(r.shape.size() > 1 ? r.shape.begin() + 1 : r.shape.end(), r.shape.end());
  const int64_t row_bytes = NumElements(trailing) * DataTypeSize(r.dtype);
  std::vector<int> counts(ctx.size), displs(ctx.size);
  int64_t rows = 0;
  for (int i = 0; i < ctx.size; ++i) {
    TFR_RETURN_IF_ERROR(ToIntCount(ctx, r.sizes[i], "allgather rows", &counts[i]));
    TFR_RETURN_IF_ERROR(ToIntCount(ctx, rows, "allgather offset", &displs[i]));
    rows += r.sizes[i];
  }
  Shape out_shape = {rows};
  out_shape.insert(out_shape.end(), trailing.begin(), trailing.end());
  TFR_RETURN_IF_ERROR(e->context->AllocateOutput(e->output_index, out_shape, &e->output));
  if (rows == 0 || row_bytes == 0) return Status::OK();
  RowType row(row_bytes);
  if (UseHierarchical(ctx, ctx.hierarchical_allgather))
    return HierarchicalAllgatherv(ctx, r, e->input->data(), counts, row.get(), row_bytes,
                                  static_cast<char*>(e->output->data()));
  TFR_CHECK_MPI(MPI_Allgatherv(e->input->data(), counts[ctx.rank], row.get(), e->output->data(), counts.data(),
                               displs.data(), row.get(), ctx.comm));
  return Status::OK();
}

}  // namespace tfring
