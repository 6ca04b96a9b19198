// The GPU registrations of tfring's TensorFlow kernels. Only this file (with the adapter and the XLA ops) reads
// the GPU macros, so a GPU build recompiles it and not every op file (setup.py's reads_gpu_macros); in a CPU build
// RegisterGpuKernel registers nothing. Compiled in every build (its name has no "gpu": Bazel's CPU-only build leaves
// such files out).
#include "kernel.h"

namespace tfring {
namespace tf {

bool RegisterGpuKernel(const char* op_name, tfw::OpKernel* (*create)(tfw::OpKernelConstruction*),
                       std::vector<const char*> host_memory) {
#ifdef TFRING_HAVE_NCCL
  tfw::KernelDefBuilder builder(op_name);
  builder.Device(tfw::DEVICE_GPU);
  for (const char* arg : host_memory) builder.HostMemory(arg);
  // Kept for the process, as REGISTER_KERNEL_BUILDER's registrar and KernelDef are.
  new tfw::kernel_factory::OpKernelRegistrar(builder.Build(), op_name, create);
  return true;
#else
  (void)op_name, (void)create, (void)host_memory;
  return false;
#endif
}

}  // namespace tf
}  // namespace tfring
