// Hierarchical allreduce and allgather (TFRING_HIERARCHICAL_ALLREDUCE / _ALLGATHER): ranks that share a host
// combine over shared memory first, so each host's data crosses the network once instead of once per rank.
//
// Allreduce, two variants (docs/scaling.md has the measurements):
// - hosts with equal rank counts: reduce-scatter within the host, allreduce of each shard across hosts among the
//   ranks with the same local rank (every host's link carries its shard in parallel), allgather within the host;
// - uneven hosts (e.g. 3+1 ranks): reduce to the host's first rank, allreduce among those, broadcast in the host.
// From kRingBytes the reduce-scatter within the host and the cross-host allreduce are rings (ring.cc): faster than
// Open MPI's over shared memory, and across hosts they keep both directions of every link busy.
// Allgather: gather to the host's first rank, allgather of whole host blocks among those, broadcast in the host;
// blocks arrive host by host, so rows are put back in rank order when hosts do not hold consecutive ranks.
#include <cstring>

#include "../../timeline.h"
#include "../layout.h"
#include "collectives.h"

namespace tfring {
namespace {

// n elements split over p parts as evenly as possible (layout.h), as MPI's int counts and displacements.
void SplitEvenly(int n, int p, std::vector<int>* counts, std::vector<int>* displs) {
  const std::vector<int64_t> c = EvenRowCounts(n, p), d = Offsets(c);
  counts->assign(c.begin(), c.end());
  displs->assign(d.begin(), d.end());
}

Status CrossAllreduce(MpiContext& ctx, const Response& r, char* buf, int n) {
  const MPI_Datatype type = ctx.Type(r.dtype);
  if (static_cast<int64_t>(n) * DataTypeSize(r.dtype) >= kRingBytes)
    return RingAllreduce(ctx, r, buf, n, ctx.cross_comm);
  TFR_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, n, type, ctx.Op(r.reduce_op, r.dtype), ctx.cross_comm));
  return Status::OK();
}

// One chunk of at most max_count elements, in place in `buf` (the caller copied the input there).
Status ReduceScatterShards(MpiContext& ctx, const Response& r, char* buf, int n) {
  const int64_t esize = DataTypeSize(r.dtype);
  const MPI_Datatype type = ctx.Type(r.dtype);
  const MPI_Op op = ctx.Op(r.reduce_op, r.dtype);
  std::vector<int> counts, displs;
  SplitEvenly(n, ctx.local_size, &counts, &displs);
  char* mine = buf + static_cast<int64_t>(displs[ctx.local_rank]) * esize;
  const int64_t mine_bytes = static_cast<int64_t>(counts[ctx.local_rank]) * esize;
  if (static_cast<int64_t>(n) * esize >= kRingBytes) {  // the ring leaves this rank's shard reduced in its place
    const std::vector<int64_t> c(counts.begin(), counts.end()), d(displs.begin(), displs.end());
    TFR_RETURN_IF_ERROR(RingReduceScatter(ctx, r, buf, c, d, ctx.local_comm));
  } else {  // in place, MPI leaves this rank's reduced shard at the start of the buffer; move it to its place
    TFR_CHECK_MPI(MPI_Reduce_scatter(MPI_IN_PLACE, buf, counts.data(), type, op, ctx.local_comm));
    if (mine != buf && mine_bytes > 0) std::memmove(mine, buf, mine_bytes);
  }
  if (counts[ctx.local_rank] > 0) {
    TFR_RETURN_IF_ERROR(CrossAllreduce(ctx, r, mine, counts[ctx.local_rank]));
    FinishAllreduce(ctx, r, mine, counts[ctx.local_rank], false);  // 1/local_size of the division, before the allgather
  }
  TFR_CHECK_MPI(
      MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts.data(), displs.data(), type, ctx.local_comm));
  return Status::OK();
}

Status ReduceToHostRoot(MpiContext& ctx, const Response& r, char* buf, int n) {
  const MPI_Datatype type = ctx.Type(r.dtype);
  const MPI_Op op = ctx.Op(r.reduce_op, r.dtype);
  const bool root = ctx.local_rank == 0;
  TFR_CHECK_MPI(MPI_Reduce(root ? MPI_IN_PLACE : buf, root ? buf : nullptr, n, type, op, 0, ctx.local_comm));
  if (root) {
    TFR_RETURN_IF_ERROR(CrossAllreduce(ctx, r, buf, n));
    FinishAllreduce(ctx, r, buf, n, false);  // before the broadcast hands it round
  }
  TFR_CHECK_MPI(MPI_Bcast(buf, n, type, 0, ctx.local_comm));
  return Status::OK();
}

}  // namespace

bool UseHierarchical(const MpiContext& ctx, bool wanted) { return wanted && ctx.num_hosts > 1 && ctx.max_local > 1; }

Status HierarchicalAllreduce(MpiContext& ctx, const Response& r, const char* in, char* out, int n) {
  if (in != out) std::memcpy(out, in, static_cast<int64_t>(n) * DataTypeSize(r.dtype));
  if (ctx.homogeneous && n >= ctx.local_size) return ReduceScatterShards(ctx, r, out, n);
  return ReduceToHostRoot(ctx, r, out, n);
}

Status HierarchicalAllgatherv(MpiContext& ctx, const Response& r, const void* in, const std::vector<int>& rows,
                              MPI_Datatype row, int64_t row_bytes, char* out) {
  TimelineActivity mpi(ctx.timeline, r.names, "MPI_HIERARCHICAL_ALLGATHER");
  // Rows of every rank in host order (the order host blocks arrive in): ctx.host_order lists global ranks.
  std::vector<int64_t> offset(ctx.size);  // rows before each rank in rank order
  for (int i = 1; i < ctx.size; ++i) offset[i] = offset[i - 1] + rows[i - 1];
  const int64_t total = offset[ctx.size - 1] + rows[ctx.size - 1];
  char* blocks = out;            // hosts holding consecutive ranks: host order is rank order, no staging
  if (!ctx.hosts_consecutive) {  // staged in the kept scratch buffer (fresh pages fault on first touch)
    if (static_cast<int64_t>(ctx.scratch.size()) < total * row_bytes) ctx.scratch.resize(total * row_bytes);
    blocks = ctx.scratch.data();
  }
  // Local gather at the host root, at the host block's place in `blocks`.
  std::vector<int> local_counts(ctx.local_size), local_displs(ctx.local_size);
  std::vector<int> host_counts(ctx.num_hosts, 0), host_displs(ctx.num_hosts, 0);
  for (int i = 0, h = -1, pos = 0; i < ctx.size; ++i) {
    const int g = ctx.host_order[i];
    if (h != ctx.host_of[g]) h = ctx.host_of[g], host_displs[h] = pos;
    host_counts[h] += rows[g];
    pos += rows[g];
  }
  const int my_host = ctx.host_of[ctx.rank];
  for (int i = 0, l = 0, pos = 0; i < ctx.size; ++i) {
    const int g = ctx.host_order[i];
    if (ctx.host_of[g] != my_host) continue;
    local_counts[l] = rows[g];
    local_displs[l++] = pos;
    pos += rows[g];
  }
  char* host_block = blocks + static_cast<int64_t>(host_displs[my_host]) * row_bytes;
  const bool root = ctx.local_rank == 0;
  TFR_CHECK_MPI(MPI_Gatherv(in, rows[ctx.rank], row, host_block, local_counts.data(), local_displs.data(), row, 0,
                            ctx.local_comm));
  if (root)
    TFR_CHECK_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, blocks, host_counts.data(), host_displs.data(),
                                 row, ctx.cross_comm));
  for (int64_t off = 0; off < total * row_bytes; off += ctx.max_count) {
    const int len = static_cast<int>(std::min<int64_t>(ctx.max_count, total * row_bytes - off));
    TFR_CHECK_MPI(MPI_Bcast(blocks + off, len, MPI_BYTE, 0, ctx.local_comm));
  }
  if (blocks == out) return Status::OK();
  for (int i = 0, pos = 0; i < ctx.size; ++i) {  // host order -> rank order
    const int g = ctx.host_order[i];
    std::memcpy(out + offset[g] * row_bytes, blocks + static_cast<int64_t>(pos) * row_bytes, rows[g] * row_bytes);
    pos += rows[g];
  }
  return Status::OK();
}

}  // namespace tfring
