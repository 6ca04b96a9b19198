// HorovodAllreduce and HorovodGroupedAllreduce: one kernel, one entry per input, completed together; the
// output has the input's shape, so it is allocated (or the input forwarded) before the collective runs.
#include "kernel.h"

namespace tfring {
namespace tf {

class AllreduceOp : public ReductionKernel {
 public:
  explicit AllreduceOp(tfw::OpKernelConstruction* c) : ReductionKernel(c, OpType::ALLREDUCE) {}

 protected:
  bool SameShape(tfw::OpKernelContext*) const override { return true; }
};

TFRING_REGISTER_KERNELS("HorovodAllreduce", AllreduceOp);
TFRING_REGISTER_KERNELS("HorovodGroupedAllreduce", AllreduceOp);

}  // namespace tf
}  // namespace tfring
