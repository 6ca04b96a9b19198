// HorovodAlltoall: splits travel with the request; the coordinator checks them against every rank.
#include "kernel.h"

namespace tfring {
namespace tf {

class AlltoallOp : public CollectiveKernel {
 public:
  explicit AlltoallOp(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::ALLTOALL) {}

 protected:
  int NumEntries(tfw::OpKernelContext*) const override { return 1; }  // input 1 is the splits
  bool SameShape(tfw::OpKernelContext*) const override { return false; }
  bool Customize(tfw::OpKernelContext* ctx, int, TensorEntry* entry) override {
    const tfw::Tensor& splits = ctx->input(1);
    if (splits.dims() > 1) {
      ctx->SetStatus(tfw::errors::InvalidArgument("tfring: alltoall splits must be a vector, got shape ",
                                                  splits.shape().DebugString()));
      return false;
    }
    auto flat = splits.flat<int32_t>();
    for (int64_t i = 0; i < flat.size(); ++i) entry->request.splits.push_back(flat(i));
    entry->extra_output_index = 1;
    return true;
  }
};

REGISTER_KERNEL_BUILDER(Name("HorovodAlltoall").Device(tfw::DEVICE_CPU), AlltoallOp);
// The splits live in host memory on GPU too.
TFRING_REGISTER_GPU_KERNEL("HorovodAlltoall", AlltoallOp, "splits", "received_splits");

}  // namespace tf
}  // namespace tfring
