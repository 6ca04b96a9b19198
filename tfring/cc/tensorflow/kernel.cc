#include "kernel.h"

namespace tfring {
namespace tf {

CollectiveKernel::CollectiveKernel(tfw::OpKernelConstruction* c, OpType op) : AsyncOpKernel(c), op_(op) {
  bool ignore_name_scope = false;
  OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignore_name_scope));
  OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  name_ = TensorName(c, ignore_name_scope);
}

void CollectiveKernel::ComputeAsync(tfw::OpKernelContext* ctx, DoneCallback done) {
  if (!CheckRuntime(ctx, process_set_id_)) return done();
  const int n = NumEntries(ctx);
  std::vector<TensorEntry> entries(n);
  const bool same_shape = SameShape(ctx);
  for (int i = 0; i < n; ++i) {
    // Grouped ops negotiate each input under its own name.
    const std::string name = n == 1 ? name_ : name_ + "_" + std::to_string(i);
    if (!MakeEntry(ctx, i, name, op_, same_shape, &entries[i]) || !Customize(ctx, i, &entries[i])) return done();
  }
  StatusCallback cb = Completion::Make(ctx, std::move(done), n);
  for (auto& e : entries) e.callback = cb;
  Runtime::Get().Enqueue(std::move(entries), process_set_id_);
}

ReductionKernel::ReductionKernel(tfw::OpKernelConstruction* c, OpType op) : CollectiveKernel(c, op) {
  int reduce_op = 0;
  OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op));
  OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
  OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  const bool adasum = reduce_op == static_cast<int>(ReduceOp::ADASUM);
  OP_REQUIRES(c, reduce_op >= 0 && reduce_op <= 5 && !(adasum && op == OpType::REDUCESCATTER),
              tfw::errors::InvalidArgument("tfring: unsupported reduce_op=", reduce_op, " for ", OpTypeName(op),
                                           " (Average=0, Sum=1, Adasum=2 (allreduce only), Min=3, Max=4, "
                                           "Product=5)"));
  reduce_op_ = static_cast<ReduceOp>(reduce_op);
}

bool ReductionKernel::Customize(tfw::OpKernelContext*, int, TensorEntry* entry) {
  entry->request.reduce_op = reduce_op_;
  entry->request.prescale = prescale_;
  entry->request.postscale = postscale_;
  return true;
}

}  // namespace tf
}  // namespace tfring
