// The GPU side of the runtime, present only in builds with NCCL (TFRING_HAVE_NCCL). Collectives on GPU
// tensors run on the backend's own CUDA stream; the background thread only enqueues work and never waits
// for the GPU; a completion thread runs the callbacks once the work has finished (or its deadline passed).
#pragma once
#include <memory>
#include <vector>

#include "../message.h"
#include "../tensor.h"
#include "../transport.h"

namespace tfring {

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  // Framework thread, at enqueue: record on entry->gpu_stream that the input is ready (entry->ready_event).
  virtual Status RecordReady(TensorEntry* entry) = 0;
  // Background thread. entries[i] matches response.names[i]. On OK the backend has taken the entries and will
  // run their callbacks; on error nothing was enqueued and the entries stay with the caller.
  virtual Status Execute(const Response& response, std::vector<TensorEntry>* entries) = 0;
  // Waits (up to the deadline) for enqueued work, then frees communicators, streams and buffers.
  virtual void Finalize() = 0;
};

// transport: negotiation channel used to broadcast NCCL unique ids (collective: all ranks call it in the same
// order, which the runtime guarantees by executing responses in negotiated order).
// timeout_seconds: deadline for one GPU collective; past it the communicator is aborted and the ops fail.
Status CreateNcclBackend(Transport& transport, int rank, int size, double timeout_seconds,
                         std::unique_ptr<GpuBackend>* out);

}  // namespace tfring

namespace tfring {

class DeviceCopier;
// Host staging's CUDA copies (ops/staging.h; NCCL builds only).
std::unique_ptr<DeviceCopier> CreateCudaCopier();

// The core's CUDA runtime for adapters that link none of their own (the XLA "CUDA" handlers): the runtime is
// linked statically into the core and its symbols are not exported. Defined in NCCL builds only.
Status GpuMalloc(int device, int64_t bytes, void** out);
void GpuFree(void* p);
// Queued on `stream`; a pageable `src` is staged before this returns, so it may be freed right after.
Status GpuCopyHostToDevice(void* dst, const void* src, int64_t bytes, void* stream);

}  // namespace tfring
