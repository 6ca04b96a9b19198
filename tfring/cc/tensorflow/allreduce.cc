// HorovodAllreduce, HorovodAllgather, HorovodReducescatter and their HorovodGrouped* twins: one kernel per op, one
// entry per input, completed together. Allreduce's output has the input's shape, so it is allocated (or the input
// forwarded) before the collective runs; allgather's and reducescatter's first dimension is known once every rank's
// is, and the output is allocated on the background thread.
#include "kernel.h"

namespace tfring {
namespace tf {

// These kernels differ only in their collective, their base (a reduction reads reduce_op and the scale factors)
// and whether the output has the input's shape.
template <typename Base, OpType kOp, bool kSameShape>
class FixedShapeRuleOp : public Base {
 public:
  explicit FixedShapeRuleOp(tfw::OpKernelConstruction* c) : Base(c, kOp) {}

 protected:
  bool SameShape(tfw::OpKernelContext*) const override { return kSameShape; }
};

using AllreduceOp = FixedShapeRuleOp<ReductionKernel, OpType::ALLREDUCE, true>;
using AllgatherOp = FixedShapeRuleOp<CollectiveKernel, OpType::ALLGATHER, false>;
using ReducescatterOp = FixedShapeRuleOp<ReductionKernel, OpType::REDUCESCATTER, false>;

TFRING_REGISTER_KERNELS("HorovodAllreduce", AllreduceOp);
TFRING_REGISTER_KERNELS("HorovodGroupedAllreduce", AllreduceOp);
TFRING_REGISTER_KERNELS("HorovodAllgather", AllgatherOp);
TFRING_REGISTER_KERNELS("HorovodGroupedAllgather", AllgatherOp);
TFRING_REGISTER_KERNELS("HorovodReducescatter", ReducescatterOp);
TFRING_REGISTER_KERNELS("HorovodGroupedReducescatter", ReducescatterOp);

}  // namespace tf
}  // namespace tfring
