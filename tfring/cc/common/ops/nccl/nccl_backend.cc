// The GPU backend: streams wait on the framework's ready events, collectives run on the communicator's own
// stream, and a completion queue runs the callbacks once the stream's completion event has fired.
#include <memory>

#include "../../completion_queue.h"
#include "../../logging.h"
#include "../gpu_backend.h"
#include "collectives.h"

namespace tfring {
namespace {

// Owns a cudaEvent_t behind the core's type-erased handle.
std::shared_ptr<void> NewEvent(Status* status) {
  cudaEvent_t ev = nullptr;
  cudaError_t err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    *status = Status::Unknown(std::string("tfring: cudaEventCreate failed: ") + cudaGetErrorString(err));
    return nullptr;
  }
  return std::shared_ptr<void>(ev, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
}

class NcclBackend : public GpuBackend {
 public:
  NcclBackend(Transport& transport, int rank, int size, double timeout_seconds)
      : context_(transport, rank, size, timeout_seconds), completions_(timeout_seconds, [this](const std::string& why) {
          TFR_LOG(TFR_ERROR, why << "; aborting the NCCL communicators");
          context_.Abort();
        }) {}

  Status RecordReady(TensorEntry* entry) override {
    // Runs on a framework thread: leave its current device as it was.
    int previous = -1;
    TFR_CHECK_CUDA(cudaGetDevice(&previous));
    TFR_CHECK_CUDA(cudaSetDevice(entry->request.device));
    Status s;
    std::shared_ptr<void> ev = NewEvent(&s);
    // Recorded on the framework's stream right after the producers of the input: our stream waits on it.
    if (s.ok()) {
      cudaError_t e = cudaEventRecord(static_cast<cudaEvent_t>(ev.get()), static_cast<cudaStream_t>(entry->gpu_stream));
      if (e != cudaSuccess)
        s = Status::Unknown(std::string("tfring: cudaEventRecord failed: ") + cudaGetErrorString(e));
    }
    cudaSetDevice(previous);
    TFR_RETURN_IF_ERROR(s);
    entry->ready_event = std::move(ev);
    return Status::OK();
  }

  Status Execute(const Response& r, std::vector<TensorEntry>* entries) override {
    // Get first: creating a communicator is collective on the negotiation transport, so every rank makes that
    // call whatever its local state; only then may a broken rank refuse.
    NcclComm* c;
    TFR_RETURN_IF_ERROR(context_.Get(r.devices, &c));
    if (completions_.broken())
      return Status::Aborted(
          "tfring: an earlier GPU collective failed or timed out; the NCCL communicators were "
          "aborted and no more GPU collectives can run");
    TFR_CHECK_CUDA(cudaSetDevice(c->device));
    Status s = Enqueue(c, r, entries);
    // Work may already be on the stream: let it finish before the caller's callbacks release the buffers.
    if (!s.ok()) cudaStreamSynchronize(c->stream);
    return s;
  }

 private:
  Status Enqueue(NcclComm* c, const Response& r, std::vector<TensorEntry>* entries) {
    for (auto& e : *entries)
      if (e.ready_event)
        TFR_CHECK_CUDA(cudaStreamWaitEvent(c->stream, static_cast<cudaEvent_t>(e.ready_event.get()), 0));
    // In OpType's order: the data collectives; the others have no GPU implementation.
    static Status (*const kCollectives[])(NcclComm&, const Response&, GpuEntries&) = {
        NcclAllreduce, NcclAllgather, NcclBroadcast, NcclAlltoall, NcclReducescatter};
    const auto collective = ByEnum(kCollectives, r.op, nullptr);
    if (!collective)
      return Status::InvalidArgument(std::string("tfring: ") + OpTypeName(r.op) + " has no GPU implementation");
    TFR_RETURN_IF_ERROR(collective(*c, r, *entries));
    Status s;
    std::shared_ptr<void> done = NewEvent(&s);
    TFR_RETURN_IF_ERROR(s);
    TFR_CHECK_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(done.get()), c->stream));
    ncclComm_t comm = c->comm;
    CompletionQueue::Item item;
    item.names = r.names;
    item.entries = std::move(*entries);
    entries->clear();
    item.probe = [done, comm](std::string* error) {
      ncclResult_t async_err = ncclSuccess;
      // ncclInProgress is a non-blocking communicator still working, not an error.
      if (comm && ncclCommGetAsyncError(comm, &async_err) == ncclSuccess && async_err != ncclSuccess &&
          async_err != ncclInProgress) {
        *error = std::string("NCCL: ") + ncclGetErrorString(async_err);
        return CompletionQueue::FAILED;
      }
      cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(done.get()));
      if (e == cudaErrorNotReady) return CompletionQueue::RUNNING;
      if (e == cudaSuccess) return CompletionQueue::DONE;
      *error = std::string("CUDA: ") + cudaGetErrorString(e);
      return CompletionQueue::FAILED;
    };
    completions_.Push(std::move(item));
    return Status::OK();
  }

 public:
  void Finalize() override {
    completions_.Drain();
    context_.Destroy();
  }

 private:
  NcclContext context_;
  CompletionQueue completions_;
};

}  // namespace

Status CreateNcclBackend(Transport& transport, int rank, int size, double timeout_seconds,
                         std::unique_ptr<GpuBackend>* out) {
  out->reset(new NcclBackend(transport, rank, size, timeout_seconds));
  return Status::OK();
}

}  // namespace tfring
