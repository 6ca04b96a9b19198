// HorovodAlltoall: splits travel with the request; the coordinator checks them against every rank.
#include "adapter.h"

namespace tfring {
namespace tf {

class AlltoallOp : public tfw::AsyncOpKernel {
 public:
  explicit AlltoallOp(tfw::OpKernelConstruction* c) : AsyncOpKernel(c) {
    bool ignore_name_scope = false;
    OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignore_name_scope));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
    name_ = TensorName(c, ignore_name_scope);
  }

  void ComputeAsync(tfw::OpKernelContext* ctx, DoneCallback done) override {
    if (!CheckRuntime(ctx, process_set_id_)) return done();
    std::vector<TensorEntry> entries(1);
    TensorEntry& e = entries[0];
    if (!MakeEntry(ctx, 0, name_, OpType::ALLTOALL, /*same_shape=*/false, &e)) return done();
    const tfw::Tensor& splits = ctx->input(1);
    OP_REQUIRES_ASYNC(ctx, splits.dims() <= 1,
                      tfw::errors::InvalidArgument("tfring: alltoall splits must be a vector, got shape ",
                                                   splits.shape().DebugString()),
                      done);
    auto flat = splits.flat<int32_t>();
    for (int64_t i = 0; i < flat.size(); ++i) e.request.splits.push_back(flat(i));
    e.extra_output_index = 1;
    e.callback = Completion::Make(ctx, std::move(done), 1);
    Runtime::Get().Enqueue(std::move(entries), process_set_id_);
  }

 private:
  int process_set_id_ = 0;
  std::string name_;
};

REGISTER_KERNEL_BUILDER(Name("HorovodAlltoall").Device(tfw::DEVICE_CPU), AlltoallOp);
#ifdef TFRING_HAVE_NCCL  // GPU tensors stay on the GPU: NCCL on the device, TF's stream never blocked
REGISTER_KERNEL_BUILDER(
    Name("HorovodAlltoall").Device(tfw::DEVICE_GPU).HostMemory("splits").HostMemory("received_splits"),
    AlltoallOp);
#endif

}  // namespace tf
}  // namespace tfring
