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
      : context_(transport, rank, size),
        completions_(timeout_seconds, [this](const std::string& why) {
          TFR_LOG(TFR_ERROR, why << "; aborting the NCCL communicators");
          context_.Abort();
        }) {}

  Status RecordReady(TensorEntry* entry) override {
    TFR_CHECK_CUDA(cudaSetDevice(entry->request.device));
    Status s;
    std::shared_ptr<void> ev = NewEvent(&s);
    TFR_RETURN_IF_ERROR(s);
    // Recorded on the framework's stream right after the producers of the input: our stream waits on it.
    TFR_CHECK_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(ev.get()), static_cast<cudaStream_t>(entry->gpu_stream)));
    entry->ready_event = std::move(ev);
    return Status::OK();
  }

  Status Execute(const Response& r, std::vector<TensorEntry>* entries) override {
    if (completions_.broken())
      return Status::Aborted("tfring: an earlier GPU collective failed or timed out; the NCCL communicators were "
                             "aborted and no more GPU collectives can run");
    NcclComm* c;
    TFR_RETURN_IF_ERROR(context_.Get(r.devices, &c));
    TFR_CHECK_CUDA(cudaSetDevice(c->device));
    for (auto& e : *entries)
      if (e.ready_event) TFR_CHECK_CUDA(cudaStreamWaitEvent(c->stream, static_cast<cudaEvent_t>(e.ready_event.get()), 0));
    switch (r.op) {
      case OpType::ALLREDUCE: TFR_RETURN_IF_ERROR(NcclAllreduce(*c, r, *entries)); break;
      case OpType::ALLGATHER: TFR_RETURN_IF_ERROR(NcclAllgather(*c, r, *entries)); break;
      case OpType::BROADCAST: TFR_RETURN_IF_ERROR(NcclBroadcast(*c, r, *entries)); break;
      case OpType::ALLTOALL: TFR_RETURN_IF_ERROR(NcclAlltoall(*c, r, *entries)); break;
      case OpType::REDUCESCATTER: TFR_RETURN_IF_ERROR(NcclReducescatter(*c, r, *entries)); break;
      default:
        return Status::InvalidArgument(std::string("tfring: ") + OpTypeName(r.op) + " has no GPU implementation");
    }
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
      if (comm && ncclCommGetAsyncError(comm, &async_err) == ncclSuccess && async_err != ncclSuccess) {
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
