// HorovodAllreduce and HorovodGroupedAllreduce: one kernel, one entry per input, completed together.
#include "adapter.h"

namespace tfring {
namespace tf {

class AllreduceOp : public tfw::AsyncOpKernel {
 public:
  explicit AllreduceOp(tfw::OpKernelConstruction* c) : AsyncOpKernel(c) {
    int reduce_op = 0;
    bool ignore_name_scope = false;
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignore_name_scope));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
    OP_REQUIRES(c, reduce_op >= 0 && reduce_op <= 5,
                tfw::errors::InvalidArgument("tfring: unsupported reduce_op=", reduce_op,
                                             " (Average=0, Sum=1, Adasum=2, Min=3, Max=4, Product=5)"));
    reduce_op_ = static_cast<ReduceOp>(reduce_op);
    name_ = TensorName(c, ignore_name_scope);
  }

  void ComputeAsync(tfw::OpKernelContext* ctx, DoneCallback done) override {
    if (!CheckRuntime(ctx, process_set_id_)) return done();
    const int n = ctx->num_inputs();
    std::vector<TensorEntry> entries(n);
    for (int i = 0; i < n; ++i) {
      const std::string name = n == 1 ? name_ : name_ + "_" + std::to_string(i);
      if (!MakeEntry(ctx, i, name, OpType::ALLREDUCE, /*same_shape=*/true, &entries[i])) return done();
      entries[i].request.reduce_op = reduce_op_;
      entries[i].request.prescale = prescale_;
      entries[i].request.postscale = postscale_;
    }
    StatusCallback cb = Completion::Make(ctx, std::move(done), n);
    for (auto& e : entries) e.callback = cb;
    Runtime::Get().Enqueue(std::move(entries), process_set_id_);
  }

 private:
  ReduceOp reduce_op_ = ReduceOp::SUM;
  float prescale_ = 1.f, postscale_ = 1.f;
  int process_set_id_ = 0;
  std::string name_;
};

REGISTER_KERNEL_BUILDER(Name("HorovodAllreduce").Device(tfw::DEVICE_CPU), AllreduceOp);
REGISTER_KERNEL_BUILDER(Name("HorovodGroupedAllreduce").Device(tfw::DEVICE_CPU), AllreduceOp);
#ifdef TFRING_HAVE_NCCL  // GPU tensors stay on the GPU: NCCL on the device, TF's stream never blocked
REGISTER_KERNEL_BUILDER(Name("HorovodAllreduce").Device(tfw::DEVICE_GPU), AllreduceOp);
REGISTER_KERNEL_BUILDER(Name("HorovodGroupedAllreduce").Device(tfw::DEVICE_GPU), AllreduceOp);
#endif

}  // namespace tf
}  // namespace tfring
