// Ring collectives written over point-to-point calls, where Open MPI's own are slow here:
// - reduce-scatter: MPI_Reduce_scatter(_block) page-faults a fresh temporary on every call, even at 1 MiB, and
//   took 0.63 ms for 1 MiB and 11.4 ms for 16 MiB at np=2 where this ring takes 0.15 and 2.1 (np=3: 4-5x too);
// - the cross-host allreduce of hierarchical.cc: Open MPI's between 2 ranks sent the whole buffer one way and
//   back, leaving each direction of the link idle half the time (docs/scaling.md).
// Each block is reduced in one order at one rank and then copied, so every rank ends with the same bits.
#include <algorithm>

#include "../layout.h"
#include "collectives.h"

namespace tfring {
namespace {

int Mod(int64_t i, int p) { return static_cast<int>((i % p + p) % p); }

// A received piece is summed while it is still in cache: 64 MiB at np=2 took 10.0 ms in pieces of a chunk (8 MiB
// blocks), 8.1-8.4 in pieces of 128 KiB-2 MiB (benchmarks/bcast_bound.py, 2026-11-30).
constexpr int64_t kPieceBytes = 1 << 20;

}  // namespace

Status RingReduceScatter(MpiContext& ctx, const Response& r, char* buf, const std::vector<int64_t>& counts,
                         const std::vector<int64_t>& displs, MPI_Comm comm, const char* in, char* out, MPI_Op last_op) {
  int p = 1, me = 0;
  TFR_CHECK_MPI(MPI_Comm_size(comm, &p));
  TFR_CHECK_MPI(MPI_Comm_rank(comm, &me));
  const int64_t esize = DataTypeSize(r.dtype);
  if (p == 1) {
    if (in != nullptr) std::copy_n(in + displs[0] * esize, counts[0] * esize, out);
    return Status::OK();
  }
  const MPI_Datatype type = ctx.Type(r.dtype);
  const MPI_Op op = ctx.Op(r.reduce_op, r.dtype);
  // Blocks travel in pieces of at most chunk_bytes and kPieceBytes (bounds the kept receive buffer). Every
  // rank makes the same number of calls per step, from the largest block, so the sends and receives pair up.
  const int64_t largest = *std::max_element(counts.begin(), counts.end());
  const int64_t piece = std::max<int64_t>(1, std::min({ctx.ChunkElements(esize), largest, kPieceBytes / esize}));
  const int64_t pieces = (largest + piece - 1) / piece;
  if (static_cast<int64_t>(ctx.scratch.size()) < piece * esize) ctx.scratch.resize(piece * esize);
  const int next = Mod(me + 1, p), prev = Mod(me - 1, p);
  // In place, a block's partial sums live where the block does. Out of place, step s's partials go to one of two
  // block-sized halves of buf in turn (the other holds what this step sends), the last step's into `out`.
  const int64_t half = largest * esize;
  auto sent = [&](int s, int block) -> const char* {
    if (in == nullptr) return buf + displs[block] * esize;
    return s == 0 ? in + displs[block] * esize : buf + ((s - 1) % 2) * half;
  };
  auto summed = [&](int s, int block) -> char* {
    if (in == nullptr) return buf + displs[block] * esize;
    return s == p - 2 ? out : buf + (s % 2) * half;
  };
  // Step s sends block me-s-1 (this rank's partial sum of it) and adds the previous rank's partial of block me-s-2
  // into its own: after p-1 steps block me holds every rank's contribution.
  for (int s = 0; s < p - 1; ++s) {
    const int to = Mod(me - s - 1, p), from = Mod(me - s - 2, p);
    const char* send = sent(s, to);
    char* sum = summed(s, from);
    for (int64_t k = 0; k < pieces; ++k) {
      const int64_t at = k * piece;
      const int send_n = static_cast<int>(std::max<int64_t>(0, std::min(piece, counts[to] - at)));
      const int recv_n = static_cast<int>(std::max<int64_t>(0, std::min(piece, counts[from] - at)));
      TFR_CHECK_MPI(MPI_Sendrecv(send + std::min(at, counts[to]) * esize, send_n, type, next, 2, ctx.scratch.data(),
                                 recv_n, type, prev, 2, comm, MPI_STATUS_IGNORE));
      if (recv_n == 0) continue;
      if (in != nullptr) std::copy_n(in + (displs[from] + at) * esize, recv_n * esize, sum + at * esize);
      TFR_CHECK_MPI(MPI_Reduce_local(ctx.scratch.data(), sum + at * esize, recv_n, type,
                                     s == p - 2 && last_op != MPI_OP_NULL ? last_op : op));
    }
  }
  return Status::OK();
}

Status RingAllreduce(MpiContext& ctx, const Response& r, char* buf, int n, MPI_Comm comm, const char* in, bool finish) {
  int p = 1, me = 0;
  TFR_CHECK_MPI(MPI_Comm_size(comm, &p));
  TFR_CHECK_MPI(MPI_Comm_rank(comm, &me));
  const std::vector<int64_t> counts = EvenRowCounts(n, p), displs = Offsets(counts);
  const int64_t esize = DataTypeSize(r.dtype);
  auto at = [&](int64_t i) { return buf + displs[Mod(i, p)] * esize; };
  auto count = [&](int64_t i) { return static_cast<int>(counts[Mod(i, p)]); };
  // Average's division rides in the last reduction step (floats, no postscale: the bits of summing and then
  // dividing); otherwise this rank divides only the block it reduced, before the blocks go round.
  const MPI_Op last =
      finish && (r.postscale == 1.0 || p == 2) && p == ctx.size ? ctx.MeanLastOp(r.reduce_op, r.dtype, p) : MPI_OP_NULL;
  if (in == nullptr || in == buf) {
    TFR_RETURN_IF_ERROR(RingReduceScatter(ctx, r, buf, counts, displs, comm, nullptr, nullptr, last));
  } else {  // the partial sums of 3+ ranks go to the fusion buffer, which no direct allreduce uses meanwhile
    const int64_t largest = *std::max_element(counts.begin(), counts.end());
    const int64_t temp = (p >= 4 ? 2 : p == 3 ? 1 : 0) * largest * esize;
    if (static_cast<int64_t>(ctx.fusion_buffer.size()) < temp) ctx.fusion_buffer.resize(temp);
    TFR_RETURN_IF_ERROR(RingReduceScatter(ctx, r, ctx.fusion_buffer.data(), counts, displs, comm, in, at(me), last));
  }
  if (finish) FinishAllreduce(ctx, r, at(me), count(me), last != MPI_OP_NULL);
  const MPI_Datatype type = ctx.Type(r.dtype);
  for (int s = 0; s < p - 1; ++s)  // this rank holds reduced block me; pass the reduced blocks round
    TFR_CHECK_MPI(MPI_Sendrecv(at(me - s), count(me - s), type, Mod(me + 1, p), 3, at(me - s - 1), count(me - s - 1),
                               type, Mod(me - 1, p), 3, comm, MPI_STATUS_IGNORE));
  return Status::OK();
}

}  // namespace tfring
