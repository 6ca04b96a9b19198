// HorovodJoin, HorovodBarrier and the size/rank ops: collectives without data, and topology queries.
#include "adapter.h"

namespace tfring {
namespace tf {

// Join (its output: the last rank to join) and barrier: one entry without data on the op's process set.
template <OpType kOp>
class ControlOp : public tfw::AsyncOpKernel {
 public:
  explicit ControlOp(tfw::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }
  void ComputeAsync(tfw::OpKernelContext* ctx, DoneCallback done) override {
    if (!CheckRuntime(ctx, process_set_id_)) return done();
    std::vector<TensorEntry> entries(1);
    if (kOp == OpType::JOIN) {
      tfw::Tensor* out = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, tfw::TensorShape({}), &out), done);
      entries[0].join_result = out->flat<int32_t>().data();
    }
    entries[0].request.name = kOp == OpType::JOIN ? "__tfring_join__" : "__tfring_barrier__";
    entries[0].request.op = kOp;
    entries[0].callback = Completion::Make(ctx, std::move(done), 1);
    Runtime::Get().Enqueue(std::move(entries), process_set_id_);
  }

 private:
  int process_set_id_ = 0;
};

// Topology within a process set; non-members get the set's size and -1 for their rank (Horovod's values).
template <int (*Field)(const Topology&, bool)>
class TopologyOp : public tfw::OpKernel {
 public:
  explicit TopologyOp(tfw::OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }
  void Compute(tfw::OpKernelContext* ctx) override {
    Status s = Runtime::Get().CheckReady();
    if (!s.ok()) return ctx->SetStatus(ToTF(s));
    Topology t;
    bool included = false;
    OP_REQUIRES(
        ctx, Runtime::Get().SetTopology(process_set_id_, &t, &included),
        tfw::errors::InvalidArgument("tfring: process_set_id=", process_set_id_, " is not a registered process set"));
    tfw::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tfw::TensorShape({}), &out));
    out->scalar<int32_t>()() = Field(t, included);
  }

 private:
  int process_set_id_ = 0;
};

int SizeOf(const Topology& t, bool) { return t.size; }
int RankOf(const Topology& t, bool) { return t.rank; }
int LocalSizeOf(const Topology& t, bool) { return t.local_size; }
int LocalRankOf(const Topology& t, bool) { return t.local_rank; }
int Included(const Topology&, bool included) { return included ? 1 : 0; }

REGISTER_KERNEL_BUILDER(Name("HorovodJoin").Device(tfw::DEVICE_CPU), ControlOp<OpType::JOIN>);
REGISTER_KERNEL_BUILDER(Name("HorovodBarrier").Device(tfw::DEVICE_CPU), ControlOp<OpType::BARRIER>);
REGISTER_KERNEL_BUILDER(Name("HorovodSize").Device(tfw::DEVICE_CPU), TopologyOp<SizeOf>);
REGISTER_KERNEL_BUILDER(Name("HorovodRank").Device(tfw::DEVICE_CPU), TopologyOp<RankOf>);
REGISTER_KERNEL_BUILDER(Name("HorovodLocalSize").Device(tfw::DEVICE_CPU), TopologyOp<LocalSizeOf>);
REGISTER_KERNEL_BUILDER(Name("HorovodLocalRank").Device(tfw::DEVICE_CPU), TopologyOp<LocalRankOf>);
REGISTER_KERNEL_BUILDER(Name("HorovodProcessSetIncluded").Device(tfw::DEVICE_CPU), TopologyOp<Included>);

}  // namespace tf
}  // namespace tfring
