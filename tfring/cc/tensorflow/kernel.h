// The one base class of tfring's data-collective kernels: attrs every op has (process_set_id,
// ignore_name_scope), one entry per input (grouped ops) completed together, enqueue on the op's process set.
// A kernel names its collective and fills what is particular to it in Customize(); TFRING_REGISTER_KERNELS
// registers it for every op name on CPU (and GPU in NCCL builds, through kernel_devices.cc).
#pragma once
#include <string>
#include <vector>

#include "adapter.h"

namespace tfring {
namespace tf {

class CollectiveKernel : public tfw::AsyncOpKernel {
 public:
  CollectiveKernel(tfw::OpKernelConstruction* c, OpType op);
  void ComputeAsync(tfw::OpKernelContext* ctx, DoneCallback done) override;

 protected:
  // Data inputs that become entries (grouped ops: all; alltoall: its first, the rest are splits).
  virtual int NumEntries(tfw::OpKernelContext* ctx) const { return ctx->num_inputs(); }
  // Output `index` has the input's shape (allocated before enqueueing), else the background thread sizes it.
  virtual bool SameShape(tfw::OpKernelContext* ctx) const = 0;
  // Op-specific request fields; returns false after failing the op through ctx.
  virtual bool Customize(tfw::OpKernelContext* ctx, int index, TensorEntry* entry) { return true; }
  int process_set_id_ = 0;

 private:
  const OpType op_;
  std::string name_;
};

// Allreduce and reducescatter: reduce_op, prescale_factor, postscale_factor, validated at construction.
class ReductionKernel : public CollectiveKernel {
 public:
  ReductionKernel(tfw::OpKernelConstruction* c, OpType op);

 protected:
  bool Customize(tfw::OpKernelContext* ctx, int index, TensorEntry* entry) override;
  ReduceOp reduce_op_ = ReduceOp::SUM;
  float prescale_ = 1.f, postscale_ = 1.f;
};

// GPU tensors stay on the GPU in NCCL builds: NCCL on the device, TF's stream never blocked. Registers `create` for
// the op on GPU, `host_memory` args kept on the host (kernel_devices.cc: NCCL builds only; otherwise returns false).
bool RegisterGpuKernel(const char* op_name, tfw::OpKernel* (*create)(tfw::OpKernelConstruction*),
                       std::vector<const char*> host_memory = {});
}  // namespace tf
}  // namespace tfring

#define TFRING_CONCAT_(a, b) a##b
#define TFRING_CONCAT(a, b) TFRING_CONCAT_(a, b)
#define TFRING_REGISTER_GPU_KERNEL(op_name, Kernel, ...)                                                               \
  [[maybe_unused]] static const bool TFRING_CONCAT(tfring_gpu_kernel_, __COUNTER__) = ::tfring::tf::RegisterGpuKernel( \
      op_name, [](tfw::OpKernelConstruction* c) -> tfw::OpKernel* { return new Kernel(c); }, {__VA_ARGS__})
#define TFRING_REGISTER_KERNELS(op_name, Kernel)                                   \
  REGISTER_KERNEL_BUILDER(Name(op_name).Device(::tensorflow::DEVICE_CPU), Kernel); \
  TFRING_REGISTER_GPU_KERNEL(op_name, Kernel)
