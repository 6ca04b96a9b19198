// HorovodReducescatter and HorovodGroupedReducescatter: the output's first dimension is this rank's share,
// sized on the background thread.
#include "kernel.h"

namespace tfring {
namespace tf {

class ReducescatterOp : public ReductionKernel {
 public:
  explicit ReducescatterOp(tfw::OpKernelConstruction* c) : ReductionKernel(c, OpType::REDUCESCATTER) {}

 protected:
  bool SameShape(tfw::OpKernelContext*) const override { return false; }
};

TFRING_REGISTER_KERNELS("HorovodReducescatter", ReducescatterOp);
TFRING_REGISTER_KERNELS("HorovodGroupedReducescatter", ReducescatterOp);

}  // namespace tf
}  // namespace tfring
