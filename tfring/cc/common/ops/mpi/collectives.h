// One function per collective, one file each (allreduce.cc, allgather.cc, ...).
#pragma once
#include <vector>

#include "../../message.h"
#include "../../tensor.h"
#include "mpi_context.h"

namespace tfring {

using Entries = std::vector<TensorEntry*>;

Status MpiAllreduce(MpiContext& ctx, const Response& r, const Entries& entries);
Status MpiAdasum(MpiContext& ctx, const Response& r, const Entries& entries);  // power-of-two sets, floats
Status MpiAllgather(MpiContext& ctx, const Response& r, const Entries& entries);
Status MpiBroadcast(MpiContext& ctx, const Response& r, const Entries& entries);
Status MpiAlltoall(MpiContext& ctx, const Response& r, const Entries& entries);
Status MpiReducescatter(MpiContext& ctx, const Response& r, const Entries& entries);
Status MpiBarrier(MpiContext& ctx, const Response& r, const Entries& entries);

// allreduce.cc: postscale and Average's division (by the whole set, joined ranks included, as Horovod does) of
// reduced values; `divided`: the reduction already divided (the pair-mean op).
void FinishAllreduce(MpiContext& ctx, const Response& r, void* buf, int64_t count, bool divided);

// hierarchical.cc: whether the hierarchical path applies (asked for, several hosts, a host with several ranks);
// allreduce of n elements (in == out: in place), finished (postscale, Average's division: each rank divides only
// the shard it reduced, before the shards are gathered); allgather of rows[rank] rows per rank into out (rank order).
bool UseHierarchical(const MpiContext& ctx, bool wanted);
Status HierarchicalAllreduce(MpiContext& ctx, const Response& r, const char* in, char* out, int n);
Status HierarchicalAllgatherv(MpiContext& ctx, const Response& r, const void* in, const std::vector<int>& rows,
                              MPI_Datatype row, int64_t row_bytes, char* out);

// ring.cc, from kRingBytes up (below, Open MPI's own calls are as fast): reduce-scatter in place over comm (block i,
// counts[i] elements at displs[i], ends reduced at rank i of comm; the other blocks are left with partial sums),
// and allreduce of n elements into buf (that reduce-scatter, then a ring allgather). With `in`, the reduce-scatter
// is out of place: `in` (laid out as buf would be) is only read, this rank's reduced block is written to `out`,
// and buf holds the partial sums: 2 x the largest block (1 x at 3 ranks, none at 2); last_op, where given, makes
// the final step's sums (the pair mean). The same sums in the same order and the same messages either way, so the
// bits agree and a rank reducing in place pairs with one reducing out of place. The allreduce reads `in` (nullptr:
// in place) and, with `finish`, finishes (FinishAllreduce) the block this rank reduced before the allgather.
constexpr int64_t kRingBytes = 256 << 10;
Status RingReduceScatter(MpiContext& ctx, const Response& r, char* buf, const std::vector<int64_t>& counts,
                         const std::vector<int64_t>& displs, MPI_Comm comm, const char* in = nullptr,
                         char* out = nullptr, MPI_Op last_op = MPI_OP_NULL);
Status RingAllreduce(MpiContext& ctx, const Response& r, char* buf, int n, MPI_Comm comm, const char* in = nullptr,
                     bool finish = false);

// A contiguous datatype of `row_bytes` so counts stay in rows (large tensors keep int counts small).
class RowType {
 public:
  explicit RowType(int64_t row_bytes);
  ~RowType();
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_ = MPI_BYTE;
  bool owned_ = false;
};

// Checked narrowing for MPI's int counts (limit: ctx.max_count).
Status ToIntCount(const MpiContext& ctx, int64_t n, const char* what, int* out);

}  // namespace tfring
