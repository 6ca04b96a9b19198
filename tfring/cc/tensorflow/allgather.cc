// HorovodAllgather and HorovodGroupedAllgather: outputs are allocated once every rank's first
// dimension is known, on the background thread.
#include "kernel.h"

namespace tfring {
namespace tf {

class AllgatherOp : public CollectiveKernel {
 public:
  explicit AllgatherOp(tfw::OpKernelConstruction* c) : CollectiveKernel(c, OpType::ALLGATHER) {}

 protected:
  bool SameShape(tfw::OpKernelContext*) const override { return false; }
};

TFRING_REGISTER_KERNELS("HorovodAllgather", AllgatherOp);
TFRING_REGISTER_KERNELS("HorovodGroupedAllgather", AllgatherOp);

}  // namespace tf
}  // namespace tfring
