// The MPI backend: negotiation transport over the runtime's communicator and dispatch to collectives.
#include <algorithm>
#include <climits>

#include "../backend.h"
#include "collectives.h"

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

class MpiTransport : public Transport {
 public:
  explicit MpiTransport(MpiContext& ctx) : ctx_(ctx) {}
  int rank() const override { return ctx_.rank; }
  int size() const override { return ctx_.size; }
  Status AllreduceBitAnd(std::vector<uint64_t>* bits) override {
    TFR_CHECK_MPI(
        MPI_Allreduce(MPI_IN_PLACE, bits->data(), static_cast<int>(bits->size()), MPI_UINT64_T, MPI_BAND, ctx_.comm));
    return Status::OK();
  }
  Status GatherToRoot(const std::string& mine, std::vector<std::string>* all) override {
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(ctx_.size), displs(ctx_.size);
    TFR_CHECK_MPI(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, ctx_.comm));
    std::string joined;
    if (ctx_.rank == 0) {
      int total = 0;
      for (int i = 0; i < ctx_.size; ++i) displs[i] = total, total += lens[i];
      joined.resize(total);
    }
    TFR_CHECK_MPI(
        MPI_Gatherv(mine.data(), len, MPI_BYTE, &joined[0], lens.data(), displs.data(), MPI_BYTE, 0, ctx_.comm));
    all->clear();
    if (ctx_.rank == 0)
      for (int i = 0; i < ctx_.size; ++i) all->push_back(joined.substr(displs[i], lens[i]));
    return Status::OK();
  }
  Status BroadcastFromRoot(std::string* bytes) override {
    int len = static_cast<int>(bytes->size());
    TFR_CHECK_MPI(MPI_Bcast(&len, 1, MPI_INT, 0, ctx_.comm));
    bytes->resize(len);
    TFR_CHECK_MPI(MPI_Bcast(&(*bytes)[0], len, MPI_BYTE, 0, ctx_.comm));
    return Status::OK();
  }

 private:
  MpiContext& ctx_;
};

class MpiBackend : public Backend {
 public:
  MpiBackend() : transport_(ctx_) {}
  Status Init(int64_t comm_f, int64_t max_count, int64_t chunk_bytes) {
    ctx_.max_count = max_count;
    ctx_.chunk_bytes = chunk_bytes;
    return ctx_.Init(comm_f);
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
    Status s = b->ctx_.Init(sub);  // duplicates sub
    MPI_Comm_free(&sub);
    if (!s.ok()) return s;
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
  void Finalize() override { ctx_.Finalize(); }
  void Revoke() override { ctx_.Revoke(); }
  Status Explain(const Status& s) const override { return ctx_.Explain(s); }
  bool FaultTolerant() const override { return ctx_.fault_tolerant; }
  void SetTimeline(Timeline* timeline) override { ctx_.timeline = timeline; }
  void SetHierarchical(int bits) override {
    ctx_.hierarchical_allreduce = bits & 1;
    ctx_.hierarchical_allgather = bits & 2;
  }

 private:
  MpiContext ctx_;
  MpiTransport transport_;
};

}  // namespace

Status CreateMpiBackend(int64_t comm_f, int64_t max_count, int64_t chunk_bytes, std::unique_ptr<Backend>* out) {
  std::unique_ptr<MpiBackend> b(new MpiBackend());
  TFR_RETURN_IF_ERROR(b->Init(comm_f, max_count, chunk_bytes));
  *out = std::move(b);
  return Status::OK();
}

}  // namespace tfring
