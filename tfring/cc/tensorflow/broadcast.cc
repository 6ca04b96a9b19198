// HorovodBroadcast: root_rank is validated by the coordinator so a bad value fails on every rank.
#include "kernel.h"

namespace tfring {
namespace tf {

class BroadcastOp : public CollectiveKernel {
 public:
  explicit BroadcastOp(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::BROADCAST) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
  }

 protected:
  bool IsRoot() const { return root_rank_ == Runtime::Get().topology().rank; }
  // The root only sends, so its output shares the input's buffer (TF tensors are immutable): nothing to allocate.
  bool SameShape(tfw::OpKernelContext*) const override { return !IsRoot(); }
  bool Customize(tfw::OpKernelContext* ctx, int, TensorEntry* entry) override {
    if (IsRoot()) {
      ctx->set_output(0, ctx->input(0));
      entry->output = entry->input;
    }
    entry->request.root_rank = root_rank_;
    return true;
  }

 private:
  int root_rank_ = 0;
};

TFRING_REGISTER_KERNELS("HorovodBroadcast", BroadcastOp);

}  // namespace tf
}  // namespace tfring
