#include "nccl_context.h"

#include <chrono>
#include <thread>

#include "../layout.h"

namespace tfring {

Status NcclComm::FusionBuffer(size_t bytes, void** out) {
  if (bytes > fusion_bytes) {
    if (fusion) {
      TFR_CHECK_CUDA(cudaStreamSynchronize(stream));  // queued work may still read the old buffer
      TFR_CHECK_CUDA(cudaFree(fusion));
      fusion = nullptr;
    }
    const size_t grown = bytes + bytes / 4;  // headroom: avoid a reallocation per slightly larger batch
    TFR_CHECK_CUDA(cudaMalloc(&fusion, grown));
    fusion_bytes = grown;
  }
  *out = fusion;
  return Status::OK();
}

Status NcclWait(NcclComm& c, ncclResult_t result, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(10);
  while (result == ncclInProgress) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (c.timeout_seconds > 0 && waited > c.timeout_seconds)
      return Status::Aborted(std::string("tfring: NCCL call ") + what + " did not finish within " +
                             std::to_string(static_cast<int>(c.timeout_seconds)) +
                             " s (TFRING_GPU_TIMEOUT_SECONDS); a rank may have died or stopped submitting");
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(1)) pause *= 2;
    if (ncclCommGetAsyncError(c.comm, &result) != ncclSuccess) break;
  }
  if (result != ncclSuccess)
    return Status::Unknown(std::string("tfring: NCCL error in ") + what + ": " + ncclGetErrorString(result));
  return Status::OK();
}

Status NcclComm::WaitForFrameworkStream(void* framework_stream) {
  TFR_CHECK_CUDA(cudaEventRecord(order_event, static_cast<cudaStream_t>(framework_stream)));
  TFR_CHECK_CUDA(cudaStreamWaitEvent(stream, order_event, 0));
  return Status::OK();
}

Status NcclContext::Get(const std::vector<int32_t>& devices, NcclComm** out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = comms_.find(devices);
    if (it != comms_.end()) {
      *out = it->second.get();
      return Status::OK();
    }
  }
  std::unique_ptr<NcclComm> c(new NcclComm());
  c->device = devices[rank_];
  c->rank = rank_;
  c->size = size_;
  c->timeout_seconds = timeout_seconds_;
  // The id exchange is a collective on the negotiation transport: every rank must reach it even when its own
  // CUDA/NCCL setup failed, or the ranks' next negotiation calls would pair with the wrong MPI calls. A failing
  // root sends no bytes; every rank then fails the same collective.
  ncclUniqueId id;
  std::string bytes;
  Status local;
  cudaError_t cerr = cudaSetDevice(c->device);
  if (cerr != cudaSuccess)
    local = Status::Unknown(std::string("tfring: cudaSetDevice failed: ") + cudaGetErrorString(cerr));
  if (local.ok() && rank_ == 0) {
    ncclResult_t nerr = ncclGetUniqueId(&id);
    if (nerr == ncclSuccess)
      bytes.assign(id.internal, sizeof(id.internal));
    else
      local = Status::Unknown(std::string("tfring: ncclGetUniqueId failed: ") + ncclGetErrorString(nerr));
  }
  TFR_RETURN_IF_ERROR(transport_.BroadcastFromRoot(&bytes));
  if (bytes.size() != sizeof(id.internal))
    return Status::Unknown("tfring: rank 0 could not create an NCCL communicator for GPU collectives");
  TFR_RETURN_IF_ERROR(local);
  std::copy(bytes.begin(), bytes.end(), id.internal);
  // Every rank got here at the same negotiated response. Non-blocking, so a rank that never joins (it failed
  // after the exchange, or died) costs the others the deadline, not a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  Status init = NcclWait(*c, ncclCommInitRankConfig(&c->comm, size_, id, rank_, &config),
                         TFR_CALL_SITE("ncclCommInitRankConfig"));
  if (!init.ok()) {
    if (c->comm) ncclCommAbort(c->comm);
    return init;
  }
  // Non-blocking w.r.t. the legacy default stream, so TF's work on stream 0 never serializes with ours.
  TFR_CHECK_CUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  TFR_CHECK_CUDA(cudaEventCreateWithFlags(&c->order_event, cudaEventDisableTiming));
  *out = c.get();
  std::lock_guard<std::mutex> lock(mu_);
  comms_[devices] = std::move(c);
  return Status::OK();
}

void NcclContext::Abort() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : comms_) {
    NcclComm& c = *kv.second;
    if (c.comm) ncclCommAbort(c.comm), c.comm = nullptr;
    cudaSetDevice(c.device);  // this thread's device: the stream below belongs to it
    if (c.stream) cudaStreamSynchronize(c.stream);
  }
}

void NcclContext::Destroy() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : comms_) {
    NcclComm& c = *kv.second;
    cudaSetDevice(c.device);
    if (c.stream) cudaStreamSynchronize(c.stream), cudaStreamDestroy(c.stream);
    if (c.order_event) cudaEventDestroy(c.order_event);
    if (c.fusion) cudaFree(c.fusion);
    if (c.comm) ncclCommDestroy(c.comm);
  }
  comms_.clear();
}

Status NcclType(DataType dtype, ncclDataType_t* out) {
  // In DataType's order; ncclNumTypes where NCCL has no such type (uint16, int16, bool).
  static const ncclDataType_t kTypes[] = {ncclUint8,   ncclInt8,    ncclNumTypes, ncclNumTypes, ncclInt32,   ncclInt64,
                                          ncclFloat16, ncclFloat32, ncclFloat64,  ncclNumTypes, ncclBfloat16};
  const ncclDataType_t t = ByEnum(kTypes, dtype, ncclNumTypes);
  if (t == ncclNumTypes)
    return Status::InvalidArgument(std::string("tfring: NCCL cannot reduce dtype ") + DataTypeName(dtype) +
                                   " on GPU; cast the tensor (e.g. to int32) or reduce it on the CPU");
  *out = t;
  return Status::OK();
}

ncclRedOp_t NcclOp(ReduceOp op) {
  // In ReduceOp's order: Average is a sum divided afterwards; Adasum never reaches NCCL.
  static const ncclRedOp_t kOps[] = {ncclSum, ncclSum, ncclSum, ncclMin, ncclMax, ncclProd};
  return ByEnum(kOps, op, ncclSum);
}

}  // namespace tfring
