#include <algorithm>
#include <climits>
#include <cstring>

#include "../../timeline.h"
#include "../scale.h"
#include "collectives.h"

namespace tfring {
namespace {

// Tensors at least this big are reduced straight from their input into their output (MPI reads one buffer
// and writes the other): the fusion copies would cost more than the extra MPI call saves.
constexpr int64_t kDirectBytes = 1 << 20;

// Reductions go in calls of ctx.ChunkElements: MPI counts are int, and one call over a large buffer is slow on a
// CPU. Open MPI's allreduce allocates a temporary as large as (a share of) its buffer; from glibc's mmap threshold
// (32 MiB at most) up that memory is mapped fresh and page-faulted on every call: 100 MB at np=2 takes 12,800 minor
// faults and 40 ms in one call, 17 ms in 8 MiB calls (benchmarks/allreduce_chunks.py). chunk_bytes is rank 0's.

// Reduces chunk by chunk (in == out: in place), each chunk finished (postscale, Average's division) while it is
// still in cache.
Status Reduce(MpiContext& ctx, const Response& r, const char* in, char* out, int64_t total) {
  const bool hierarchical = UseHierarchical(ctx, ctx.hierarchical_allreduce);
  TimelineActivity mpi(ctx.timeline, r.names, hierarchical ? "MPI_HIERARCHICAL_ALLREDUCE" : "MPI_ALLREDUCE");
  const int64_t esize = DataTypeSize(r.dtype), chunk = ctx.ChunkElements(esize);
  const MPI_Op pair_mean = hierarchical ? MPI_OP_NULL : ctx.PairMeanOp(r.reduce_op, r.dtype);
  const MPI_Op op = pair_mean != MPI_OP_NULL ? pair_mean : ctx.Op(r.reduce_op, r.dtype);
  for (int64_t off = 0; off < total; off += chunk) {
    const int n = static_cast<int>(std::min(chunk, total - off));
    char* dst = out + off * esize;
    // From kRingBytes up, tfring's ring (ring.cc): out of place it reads the input where Open MPI's allreduce
    // first copies it into the output (eager 64 MiB at np=2: 12.9-13.5 ms before, 8.1-8.4 after; raw in place
    // 10.3-11.1). Chosen from what every rank knows alike (the negotiated size, the job's cores), never from whether
    // this rank's framework forwarded its input (in == out): the ranks must make the same calls. Not with fewer
    // cores than ranks: each of its steps waits for a descheduled peer (np=3 on 2 cores: 120 ms against 43-67).
    if (!hierarchical && ctx.size > 1 && ctx.min_cpu_milli_per_rank >= 1000 &&
        static_cast<int64_t>(n) * esize >= kRingBytes) {
      TFR_RETURN_IF_ERROR(RingAllreduce(ctx, r, dst, n, ctx.comm, in + off * esize, true));
      continue;
    }
    if (hierarchical) {
      TFR_RETURN_IF_ERROR(HierarchicalAllreduce(ctx, r, in + off * esize, dst, n));
    } else {
      const void* send = in == out ? MPI_IN_PLACE : static_cast<const void*>(in + off * esize);
      TFR_CHECK_MPI(MPI_Allreduce(send, dst, n, ctx.Type(r.dtype), op, ctx.comm));
    }
    if (!hierarchical)
      FinishAllreduce(ctx, r, dst, n, pair_mean != MPI_OP_NULL);  // the hierarchical path finishes its shards
  }
  return Status::OK();
}

// One tensor reduced in its own output; a joined rank (no entry) contributes zeros from the fusion buffer, one
// chunk at a time (the same MPI calls as its peers' Reduce over the whole tensor) so that buffer, which is kept,
// never grows past a chunk for a large tensor.
Status ReduceDirect(MpiContext& ctx, const Response& r, TensorEntry* e, int64_t count) {
  const int64_t esize = DataTypeSize(r.dtype), bytes = count * esize;
  if (e == nullptr) {
    const int64_t chunk = ctx.ChunkElements(esize), need = std::min(count, chunk) * esize;
    if (static_cast<int64_t>(ctx.fusion_buffer.size()) < need) ctx.fusion_buffer.resize(need);
    char* zeros = ctx.fusion_buffer.data();
    for (int64_t off = 0; off < count; off += chunk) {
      const int64_t n = std::min(chunk, count - off);
      std::memset(zeros, 0, n * esize);
      TFR_RETURN_IF_ERROR(Reduce(ctx, r, zeros, zeros, n));
    }
    return Status::OK();
  }
  char* out = static_cast<char*>(e->output->data());
  const char* in = static_cast<const char*>(e->input->data());
  if (r.prescale != 1.0) {  // scaling must not touch the input: scale a copy in the output, reduce in place
    if (in != out) std::memcpy(out, in, bytes);
    ScaleBuffer(out, count, r.dtype, r.prescale);
    in = out;
  }
  return Reduce(ctx, r, in, out, count);
}

}  // namespace

void FinishAllreduce(MpiContext& ctx, const Response& r, void* buf, int64_t count, bool divided) {
  const bool average = r.reduce_op == ReduceOp::AVERAGE && !divided;
  FinishReduction(buf, count, r.dtype, r.postscale, average ? ctx.size : 1);
}

Status MpiAllreduce(MpiContext& ctx, const Response& r, const Entries& entries) {
  const int64_t esize = DataTypeSize(r.dtype);
  // Which tensors go direct is decided from the negotiated sizes only, so every rank makes the same MPI calls.
  std::vector<size_t> fused;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries.size() == 1 || r.sizes[i] * esize >= kDirectBytes)
      TFR_RETURN_IF_ERROR(ReduceDirect(ctx, r, entries[i], r.sizes[i]));
    else
      fused.push_back(i);
  }
  if (fused.empty()) return Status::OK();
  int64_t total = 0;
  for (size_t i : fused) total += r.sizes[i];
  {
    TimelineActivity copy_in(ctx.timeline, r.names, "MEMCPY_IN_FUSION_BUFFER");
    if (static_cast<int64_t>(ctx.fusion_buffer.size()) < total * esize) ctx.fusion_buffer.resize(total * esize);
    int64_t off = 0;
    for (size_t i : fused) {
      const int64_t bytes = r.sizes[i] * esize;
      if (entries[i])
        std::memcpy(ctx.fusion_buffer.data() + off, entries[i]->input->data(), bytes);
      else
        std::memset(ctx.fusion_buffer.data() + off, 0, bytes);  // a joined rank contributes zeros
      off += bytes;
    }
  }
  char* buf = ctx.fusion_buffer.data();
  ScaleBuffer(buf, total, r.dtype, r.prescale);
  TFR_RETURN_IF_ERROR(Reduce(ctx, r, buf, buf, total));
  TimelineActivity copy_out(ctx.timeline, r.names, "MEMCPY_OUT_FUSION_BUFFER");
  int64_t off = 0;
  for (size_t i : fused) {
    const int64_t bytes = r.sizes[i] * esize;
    if (entries[i]) std::memcpy(entries[i]->output->data(), buf + off, bytes);
    off += bytes;
  }
  return Status::OK();
}

}  // namespace tfring
