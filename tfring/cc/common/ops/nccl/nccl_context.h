// NCCL state of one process: a communicator, stream and device fusion buffer per device set (the GPU of
// every rank). Compiled only in NCCL builds; all calls happen on the runtime's background thread.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../../checks.h"
#include "../../status.h"
#include "../../tensor.h"
#include "../../transport.h"
#include "../../types.h"

namespace tfring {

struct NcclComm;
Status NcclWait(NcclComm& c, ncclResult_t result, const char* what);

struct NcclComm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = -1;
  int rank = 0, size = 1;
  double timeout_seconds = 0;  // per call; 0 = none
  void* fusion = nullptr;
  size_t fusion_bytes = 0;
  cudaEvent_t order_event = nullptr;  // reused: a wait captures the event's state when it is enqueued
  // A device buffer of at least `bytes` (grown on demand; the old one is freed once the stream is idle).
  Status FusionBuffer(size_t bytes, void** out);
  // Our stream waits for everything queued so far on the framework's stream. Needed after allocating an output
  // on the background thread: TF's allocator may hand out memory that kernels still queued on its stream use.
  Status WaitForFrameworkStream(void* framework_stream);
};

class NcclContext {
 public:
  NcclContext(Transport& transport, int rank, int size, double timeout_seconds)
      : transport_(transport), rank_(rank), size_(size), timeout_seconds_(timeout_seconds) {}
  ~NcclContext() { Destroy(); }
  // The communicator for this device set, created collectively on first use (rank 0's unique id is broadcast
  // over the negotiation transport; every rank reaches this call at the same response).
  Status Get(const std::vector<int32_t>& devices, NcclComm** out);
  // Unblocks and tears down every communicator (deadline passed), then waits for their streams to drain so no
  // queued kernel touches a buffer after its op failed; safe from another thread.
  void Abort();
  void Destroy();

 private:
  Transport& transport_;
  int rank_, size_;
  double timeout_seconds_;
  std::mutex mu_;  // guards the map (Abort runs on the completion thread); never held across NCCL calls
  std::map<std::vector<int32_t>, std::unique_ptr<NcclComm>> comms_;
};

// dtype/op mapping (reductions); data movement uses ncclUint8 over bytes.
Status NcclType(DataType dtype, ncclDataType_t* out);
ncclRedOp_t NcclOp(ReduceOp op);  // AVERAGE reduces as a sum, divided afterwards

}  // namespace tfring
