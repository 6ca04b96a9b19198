// HorovodBroadcast: root_rank is validated by the coordinator so a bad value fails on every rank.
#include "adapter.h"

namespace tfring {
namespace tf {

class BroadcastOp : public tfw::AsyncOpKernel {
 public:
  explicit BroadcastOp(tfw::OpKernelConstruction* c) : AsyncOpKernel(c) {
    bool ignore_name_scope = false;
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
    OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignore_name_scope));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
    name_ = TensorName(c, ignore_name_scope);
  }

  void ComputeAsync(tfw::OpKernelContext* ctx, DoneCallback done) override {
    if (!CheckRuntime(ctx, process_set_id_)) return done();
    std::vector<TensorEntry> entries(1);
    // The root only sends, so its output can share the input's buffer: no copy (TF tensors are immutable).
    const bool root = root_rank_ == Runtime::Get().topology().rank;
    if (!MakeEntry(ctx, 0, name_, OpType::BROADCAST, /*same_shape=*/!root, &entries[0])) return done();
    if (root) {
      ctx->set_output(0, ctx->input(0));
      entries[0].output = entries[0].input;
    }
    entries[0].request.root_rank = root_rank_;
    entries[0].callback = Completion::Make(ctx, std::move(done), 1);
    Runtime::Get().Enqueue(std::move(entries), process_set_id_);
  }

 private:
  int root_rank_ = 0;
  int process_set_id_ = 0;
  std::string name_;
};

REGISTER_KERNEL_BUILDER(Name("HorovodBroadcast").Device(tfw::DEVICE_CPU), BroadcastOp);
#ifdef TFRING_HAVE_NCCL  // GPU tensors stay on the GPU: NCCL on the device, TF's stream never blocked
REGISTER_KERNEL_BUILDER(Name("HorovodBroadcast").Device(tfw::DEVICE_GPU), BroadcastOp);
#endif

}  // namespace tf
}  // namespace tfring
