// HorovodJoin, HorovodBarrier and the size/rank ops: collectives without data, and topology queries.
#include "adapter.h"

namespace tfring {
namespace tf {

class JoinOp : public tfw::AsyncOpKernel {
 public:
  explicit JoinOp(tfw::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }
  void ComputeAsync(tfw::OpKernelContext* ctx, DoneCallback done) override {
    if (!CheckRuntime(ctx, process_set_id_)) return done();
    tfw::Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, tfw::TensorShape({}), &out), done);
    std::vector<TensorEntry> entries(1);
    entries[0].request.name = "__tfring_join__";
    entries[0].request.op = OpType::JOIN;
    entries[0].join_result = out->flat<int32_t>().data();
    entries[0].callback = Completion::Make(ctx, std::move(done), 1);
    Runtime::Get().Enqueue(std::move(entries));
  }

 private:
  int process_set_id_ = 0;
};

class BarrierOp : public tfw::AsyncOpKernel {
 public:
  explicit BarrierOp(tfw::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }
  void ComputeAsync(tfw::OpKernelContext* ctx, DoneCallback done) override {
    if (!CheckRuntime(ctx, process_set_id_)) return done();
    std::vector<TensorEntry> entries(1);
    entries[0].request.name = "__tfring_barrier__";
    entries[0].request.op = OpType::BARRIER;
    entries[0].callback = Completion::Make(ctx, std::move(done), 1);
    Runtime::Get().Enqueue(std::move(entries));
  }

 private:
  int process_set_id_ = 0;
};

template <int (*Field)(const Topology&)>
class TopologyOp : public tfw::OpKernel {
 public:
  explicit TopologyOp(tfw::OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }
  void Compute(tfw::OpKernelContext* ctx) override {
    if (!CheckRuntime(ctx, process_set_id_)) return;
    tfw::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tfw::TensorShape({}), &out));
    out->scalar<int32_t>()() = Field(Runtime::Get().topology());
  }

 private:
  int process_set_id_ = 0;
};

int SizeOf(const Topology& t) { return t.size; }
int RankOf(const Topology& t) { return t.rank; }
int LocalSizeOf(const Topology& t) { return t.local_size; }
int LocalRankOf(const Topology& t) { return t.local_rank; }
int Included(const Topology&) { return 1; }

REGISTER_KERNEL_BUILDER(Name("HorovodJoin").Device(tfw::DEVICE_CPU), JoinOp);
REGISTER_KERNEL_BUILDER(Name("HorovodBarrier").Device(tfw::DEVICE_CPU), BarrierOp);
REGISTER_KERNEL_BUILDER(Name("HorovodSize").Device(tfw::DEVICE_CPU), TopologyOp<SizeOf>);
REGISTER_KERNEL_BUILDER(Name("HorovodRank").Device(tfw::DEVICE_CPU), TopologyOp<RankOf>);
REGISTER_KERNEL_BUILDER(Name("HorovodLocalSize").Device(tfw::DEVICE_CPU), TopologyOp<LocalSizeOf>);
REGISTER_KERNEL_BUILDER(Name("HorovodLocalRank").Device(tfw::DEVICE_CPU), TopologyOp<LocalRankOf>);
REGISTER_KERNEL_BUILDER(Name("HorovodProcessSetIncluded").Device(tfw::DEVICE_CPU), TopologyOp<Included>);

}  // namespace tf
}  // namespace tfring
