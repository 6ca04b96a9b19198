// GPU tensors over the host (MPI) backend, as Horovod's MPI path runs CUDA tensors without NCCL: used when two
// ranks of one host share a GPU (NCCL refuses two ranks on one device in one communicator) or TFRING_NCCL=0.
// Inputs are copied to host buffers once the framework's stream produced them, the collective runs on host
// memory (fusion, scaling and averaging as for CPU tensors), and outputs are copied back before the op completes.
// Framework- and CUDA-free: the device side is a DeviceCopier (CUDA in NCCL builds; a host-memory device with
// its own asynchronous stream in the C++ unit tests).
#pragma once
#include <memory>
#include <vector>

#include "../message.h"
#include "../tensor.h"
#include "backend.h"

namespace tfring {

class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;
  // Host memory for staging `bytes` (CUDA: pinned and reused, so copies run at full speed and fresh pages
  // do not fault on every op); freed when the last reference goes.
  virtual Status AllocateHost(int64_t bytes, std::shared_ptr<char>* out) = 0;
  // Copies `bytes` of the entry's device memory at `src` to host `dst` once everything the framework queued
  // before the op on the entry's stream has run; returns when the copy is done, or an error at `deadline`
  // (steady-clock seconds).
  virtual Status ToHost(const TensorEntry& e, void* dst, const void* src, int64_t bytes, double deadline) = 0;
  // Queues a copy of host `src` to device `dst` (an output the entry's context allocated, which work still queued
  // on the framework's stream may use: the copy runs after it); `src` must live until Finish returned OK.
  virtual Status ToDevice(const TensorEntry& e, void* dst, const void* src, int64_t bytes) = 0;
  // Waits until every queued copy is done, or returns an error at `deadline`.
  virtual Status Finish(double deadline) = 0;
};

// Whether two ranks on one host hold the same device (devices[i]: rank i's GPU; host_of[i]: rank i's host).
bool SharesDevice(const std::vector<int32_t>& devices, const std::vector<int>& host_of);

// Runs a negotiated GPU response on `host` through host buffers. entries[i] matches response.names[i] (every
// rank holds every GPU tensor). On a copy past its deadline the host buffers are kept alive (leaked): the device
// may still write them.
Status PerformStaged(const Response& response, const std::vector<TensorEntry*>& entries, Backend& host,
                     DeviceCopier& copier, double timeout_seconds, double now);

}  // namespace tfring
