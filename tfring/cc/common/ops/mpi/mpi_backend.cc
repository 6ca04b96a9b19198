// The MPI backend: negotiation transport over the runtime's communicator and dispatch to collectives.
#include <algorithm>
#include <climits>

#include "../backend.h"
#include "collectives.h"
#include "data_watch.h"
#include "transport.h"

namespace tfring {

RowType::RowType(int64_t row_bytes) {
  if (row_bytes != 1 && row_bytes <= INT_MAX) {
    MPI_Type_contiguous(static_cast<int>(row_bytes), MPI_BYTE, &type_);
    MPI_Type_commit(&type_);
    owned_ = true;
  }
}

RowType::~RowType() {
  if (owned_) MPI_Type_free(&type_);
}

Status ToIntCount(const MpiContext& ctx, int64_t n, const char* what, int* out) {
  if (n > ctx.max_count)
    return Status::InvalidArgument(std::string("tfring: ") + what + " of " + std::to_string(n) +
                                   " exceeds the per-call MPI count limit of " + std::to_string(ctx.max_count) +
                                   " (MPI counts are int)");
  *out = static_cast<int>(n);
  return Status::OK();
}

namespace {

class MpiBackend : public Backend {
 public:
  MpiBackend() : transport_(ctx_), watch_(ctx_) {}
  Status Init(int64_t comm_f, const MpiOptions& o) {
    ctx_.max_count = o.max_count;
    ctx_.chunk_bytes = o.chunk_bytes;
    ctx_.stall_warn_seconds = o.stall_warn_seconds;
    ctx_.stall_shutdown_seconds = o.stall_shutdown_seconds;
    TFR_RETURN_IF_ERROR(ctx_.Init(comm_f));
    watch_.Start();
    return Status::OK();
  }
  Status CreateSubset(const std::vector<int>& ranks, std::unique_ptr<Backend>* out) override {
    const bool member = std::binary_search(ranks.begin(), ranks.end(), ctx_.rank);
    MPI_Comm sub = MPI_COMM_NULL;
    TFR_CHECK_MPI(MPI_Comm_split(ctx_.comm, member ? 0 : MPI_UNDEFINED, ctx_.rank, &sub));
    out->reset();
    if (!member) return Status::OK();
    std::unique_ptr<MpiBackend> b(new MpiBackend());
    b->ctx_.max_count = ctx_.max_count;
    b->ctx_.chunk_bytes = ctx_.chunk_bytes;
    b->ctx_.timeline = ctx_.timeline;
    b->ctx_.stall_warn_seconds = ctx_.stall_warn_seconds;
    b->ctx_.stall_shutdown_seconds = ctx_.stall_shutdown_seconds;
    Status s = b->ctx_.Init(sub);  // duplicates sub
    // After a worker failure sub stays allocated: its context id must not be reused (mpi_context.cc, Finalize).
    if (s.code() != StatusCode::WORKERS_FAILED) MPI_Comm_free(&sub);
    if (!s.ok()) return s;
    b->watch_.Start();
    for (size_t i = 0; i < ranks.size(); ++i) b->ctx_.world_rank[i] = ctx_.world_rank[ranks[i]];
    *out = std::move(b);
    return Status::OK();
  }
  Transport& transport() override { return transport_; }
  Topology topology() const override {
    Topology t;
    t.rank = ctx_.rank;
    t.size = ctx_.size;
    t.local_rank = ctx_.local_rank;
    t.local_size = ctx_.local_size;
    t.cross_rank = ctx_.cross_rank;
    t.cross_size = ctx_.cross_size;
    t.homogeneous = ctx_.homogeneous;
    t.min_cpu_milli_per_rank = ctx_.min_cpu_milli_per_rank;
    t.host_of = ctx_.host_of;
    t.threads_supported = ctx_.thread_level == MPI_THREAD_MULTIPLE;
    return t;
  }
  Status Execute(const Response& r, const std::vector<TensorEntry*>& entries) override {
    if (r.op == OpType::JOIN) return Status::OK();
    watch_.Begin(r);
    return watch_.End(Dispatch(r, entries));
  }
  void Finalize() override {
    watch_.Stop();
    ctx_.Finalize();
  }
  void Revoke() override { ctx_.Revoke(); }
  Status Explain(const Status& s) const override { return ctx_.Explain(s); }
  bool FaultTolerant() const override { return ctx_.fault_tolerant; }
  void SetTimeline(Timeline* timeline) override { ctx_.timeline = timeline; }
  void SetHierarchical(int bits) override {
    ctx_.hierarchical_allreduce = bits & 1;
    ctx_.hierarchical_allgather = bits & 2;
  }

 private:
  Status Dispatch(const Response& r, const std::vector<TensorEntry*>& entries) {
    switch (r.op) {
      case OpType::ALLREDUCE:
        return r.reduce_op == ReduceOp::ADASUM ? MpiAdasum(ctx_, r, entries) : MpiAllreduce(ctx_, r, entries);
      case OpType::ALLGATHER:
        return MpiAllgather(ctx_, r, entries);
      case OpType::BROADCAST:
        return MpiBroadcast(ctx_, r, entries);
      case OpType::ALLTOALL:
        return MpiAlltoall(ctx_, r, entries);
      case OpType::REDUCESCATTER:
        return MpiReducescatter(ctx_, r, entries);
      case OpType::BARRIER:
        return MpiBarrier(ctx_, r, entries);
      case OpType::JOIN:
        return Status::OK();
      case OpType::PROCESS_SET:  // applied by the runtime itself (runtime_process_sets.cc), never sent here
        break;
    }
    return Status::Unknown("tfring: unknown collective");
  }

  MpiContext ctx_;
  MpiTransport transport_;
  DataWatch watch_;  // after ctx_: stopped (destroyed) before it
};

}  // namespace

Status CreateMpiBackend(int64_t comm_f, const MpiOptions& options, std::unique_ptr<Backend>* out) {
  std::unique_ptr<MpiBackend> b(new MpiBackend());
  TFR_RETURN_IF_ERROR(b->Init(comm_f, options));
  *out = std::move(b);
  return Status::OK();
}

}  // namespace tfring
