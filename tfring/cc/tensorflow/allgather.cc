// HorovodAllgather and HorovodGroupedAllgather: outputs are allocated once every rank's first
// dimension is known, on the background thread.
#include "adapter.h"

namespace tfring {
namespace tf {

class AllgatherOp : public tfw::AsyncOpKernel {
 public:
  explicit AllgatherOp(tfw::OpKernelConstruction* c) : AsyncOpKernel(c) {
    bool ignore_name_scope = false;
    OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignore_name_scope));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
    name_ = TensorName(c, ignore_name_scope);
  }

  void ComputeAsync(tfw::OpKernelContext* ctx, DoneCallback done) override {
    if (!CheckRuntime(ctx, process_set_id_)) return done();
    const int n = ctx->num_inputs();
    std::vector<TensorEntry> entries(n);
    for (int i = 0; i < n; ++i) {
      const std::string name = n == 1 ? name_ : name_ + "_" + std::to_string(i);
      if (!MakeEntry(ctx, i, name, OpType::ALLGATHER, /*same_shape=*/false, &entries[i])) return done();
    }
    StatusCallback cb = Completion::Make(ctx, std::move(done), n);
    for (auto& e : entries) e.callback = cb;
    Runtime::Get().Enqueue(std::move(entries), process_set_id_);
  }

 private:
  int process_set_id_ = 0;
  std::string name_;
};

REGISTER_KERNEL_BUILDER(Name("HorovodAllgather").Device(tfw::DEVICE_CPU), AllgatherOp);
REGISTER_KERNEL_BUILDER(Name("HorovodGroupedAllgather").Device(tfw::DEVICE_CPU), AllgatherOp);
#ifdef TFRING_HAVE_NCCL  // GPU tensors stay on the GPU: NCCL on the device, TF's stream never blocked
REGISTER_KERNEL_BUILDER(Name("HorovodAllgather").Device(tfw::DEVICE_GPU), AllgatherOp);
REGISTER_KERNEL_BUILDER(Name("HorovodGroupedAllgather").Device(tfw::DEVICE_GPU), AllgatherOp);
#endif

}  // namespace tf
}  // namespace tfring
