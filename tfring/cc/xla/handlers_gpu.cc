// tfring's XLA FFI handlers for platform "CUDA" (NCCL builds only: setup.py compiles this file when the core has
// its GPU backend). They hand XLA's device buffers to the core's GPU path, the same one the TF and torch GPU
// kernels use: negotiation as for any tensor, then NCCL on the backend's own stream (or host staging where ranks
// share a GPU). Ran on one H200 through tfring.jax (docs/gpu.md); through TensorFlow's lowering never.
//
// Ordering against XLA's stream, synchronous by design (a first version; simplest to get right):
//   - inputs: each entry carries XLA's stream; at enqueue the GPU backend records an event on it after everything
//     XLA queued before this call, and its own stream waits on that event (never the host);
//   - results: the handler blocks its (host) thread until the core's callbacks ran, which the completion queue
//     does only once the NCCL work's completion event fired, so the results are in device memory before the
//     handler returns and before XLA queues anything that reads them.
// The cost: XLA's host thread waits for the collective, so XLA cannot queue later kernels meanwhile (its stream
// drains). Blocking is safe here, unlike on CPU (handlers.cc): XLA:GPU runs one executable's thunks in program
// order on one thread, so every rank submits a program's collectives in the same order. A later version could let
// XLA's stream wait on device memory the completion thread writes (cuStreamWaitValue32) instead of the host.
// Not command-buffer compatible (no trait): XLA never captures these calls into a CUDA graph.
#include <cuda_runtime_api.h>  // types only: calls go through the core (gpu_backend.h)

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../common/ops/gpu_backend.h"
#include "call.h"

namespace tfring {
namespace xla_ffi {
namespace {

// A call on device buffers: the handler waits for it. Results XLA allocated are device memory; alltoall's received
// splits are written by the host (as the TF GPU kernel's HostMemory output), then copied to XLA's device result.
class DeviceCall : public Call {
 public:
  explicit DeviceCall(int device) : device_(device) {}
  ~DeviceCall() override {
    for (void* p : device_scratch_) GpuFree(p);
  }
  Status AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) override {
    if (index < static_cast<int>(results.size())) return Call::AllocateOutput(index, shape, out);
    auto& device = extra[index - results.size()];
    if (device->shape() != shape)
      Fail(Status::InvalidArgument("tfring: " + fn + ": received splits of " + ShapeString(shape) +
                                   " but the compiled program allocated " + ShapeString(device->shape())));
    std::lock_guard<std::mutex> lock(mu_);
    host_splits_.emplace_back(NumElements(shape));
    if (device->shape() == shape) copies_.push_back({device->data(), host_splits_.back().data(), device->size_bytes()});
    *out = std::make_shared<XlaTensor>(host_splits_.back().data(), DataType::INT32, shape);
    return Status::OK();
  }
  Status Wait() {
    std::unique_lock<std::mutex> lock(wait_mu_);
    cv_.wait(lock, [this] { return done_; });  // the core's stall deadline and the GPU deadline bound it
    return status_;
  }
  // After Wait: received splits to XLA's device results, queued on XLA's stream (pageable source: the copy is
  // staged before cudaMemcpyAsync returns, so the host vectors may go with the call).
  Status CopySplits(cudaStream_t stream) {
    for (const auto& c : copies_) TFR_RETURN_IF_ERROR(GpuCopyHostToDevice(c.device, c.host, c.bytes, stream));
    return Status::OK();
  }

 protected:
  void* Scratch(int64_t bytes) override {
    void* p = nullptr;
    if (!GpuMalloc(device_, bytes, &p).ok()) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    device_scratch_.push_back(p);
    return p;
  }
  void Complete(const Status& s) override {
    std::lock_guard<std::mutex> lock(wait_mu_);
    status_ = s;
    done_ = true;
    cv_.notify_all();
  }

 private:
  int device_;
  std::vector<void*> device_scratch_;
  std::vector<std::vector<int32_t>> host_splits_;
  struct Copy {
    void* device;  // XLA's result
    const int32_t* host;
    int64_t bytes;
  };
  std::vector<Copy> copies_;
  std::mutex wait_mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

ffi::Error Run(cudaStream_t stream, int32_t device, const CallArgs& a, ffi::RemainingArgs args, ffi::RemainingRets rets,
               int64_t set) {
  auto call = std::make_shared<DeviceCall>(device);
  std::vector<TensorEntry> entries;
  const std::string error = BuildEntries(a, args, rets, call, &entries);
  if (!error.empty())
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "tfring: " + std::string(a.fn) + ": " + error);
  if (entries.empty()) return ffi::Error::Success();
  for (auto& e : entries) {
    e.request.device = device;  // every rank's device travels in the negotiation and keys the NCCL communicator
    e.gpu_stream = stream;      // the backend records the inputs' ready event on it at enqueue
  }
  EnqueueCall(call, std::move(entries), set);
  Status s = call->Wait();
  if (s.ok()) s = call->CopySplits(stream);
  return s.ok() ? ffi::Error::Success() : ffi::Error(ToXla(s.code()), s.message());
}

ffi::Error Allreduce(cudaStream_t stream, int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets,
                     std::string_view name, int64_t reduce_op, double prescale, double postscale, int64_t set) {
  return Run(stream, device, {"allreduce", OpType::ALLREDUCE, name, reduce_op, prescale, postscale}, args, rets, set);
}
ffi::Error Allgather(cudaStream_t stream, int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets,
                     std::string_view name, int64_t set) {
  return Run(stream, device, {"allgather", OpType::ALLGATHER, name}, args, rets, set);
}
ffi::Error Broadcast(cudaStream_t stream, int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets,
                     std::string_view name, int64_t root, int64_t set) {
  return Run(stream, device, {"broadcast", OpType::BROADCAST, name, 1, 1.0, 1.0, root}, args, rets, set);
}
ffi::Error Alltoall(cudaStream_t stream, int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets,
                    std::string_view name, ffi::Span<const int64_t> splits, int64_t set) {
  return Run(stream, device, {"alltoall", OpType::ALLTOALL, name, 1, 1.0, 1.0, 0, {splits.begin(), splits.end()}}, args,
             rets, set);
}
ffi::Error Reducescatter(cudaStream_t stream, int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets,
                         std::string_view name, int64_t reduce_op, double prescale, double postscale, int64_t set) {
  return Run(stream, device, {"reducescatter", OpType::REDUCESCATTER, name, reduce_op, prescale, postscale}, args, rets,
             set);
}

// The CPU handlers' attributes, after XLA's stream and device.
auto Bind() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Ctx<ffi::DeviceOrdinal>()
      .RemainingArgs()
      .RemainingRets();
}

}  // namespace
}  // namespace xla_ffi
}  // namespace tfring

using namespace tfring::xla_ffi;  // NOLINT: the exported symbols below are C names

TFR_XLA_HANDLER_SYMBOLS(tfring_jax_gpu_);
