#include "nccl_context.h"

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

Status NcclContext::Get(const std::vector<int32_t>& devices, NcclComm** out) {
  auto it = comms_.find(devices);
  if (it != comms_.end()) {
    *out = it->second.get();
    return Status::OK();
  }
  std::unique_ptr<NcclComm> c(new NcclComm());
  c->device = devices[rank_];
  c->rank = rank_;
  c->size = size_;
  TFR_CHECK_CUDA(cudaSetDevice(c->device));
  ncclUniqueId id;
  std::string bytes;
  if (rank_ == 0) {
    TFR_CHECK_NCCL(ncclGetUniqueId(&id));
    bytes.assign(id.internal, sizeof(id.internal));
  }
  TFR_RETURN_IF_ERROR(transport_.BroadcastFromRoot(&bytes));
  if (bytes.size() != sizeof(id.internal))
    return Status::Unknown("tfring: received an NCCL unique id of " + std::to_string(bytes.size()) + " bytes");
  std::copy(bytes.begin(), bytes.end(), id.internal);
  TFR_CHECK_NCCL(ncclCommInitRank(&c->comm, size_, id, rank_));
  // Non-blocking w.r.t. the legacy default stream, so TF's work on stream 0 never serializes with ours.
  TFR_CHECK_CUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  *out = c.get();
  comms_[devices] = std::move(c);
  return Status::OK();
}

void NcclContext::Abort() {
  for (auto& kv : comms_)
    if (kv.second->comm) ncclCommAbort(kv.second->comm), kv.second->comm = nullptr;
}

void NcclContext::Destroy() {
  for (auto& kv : comms_) {
    NcclComm& c = *kv.second;
    cudaSetDevice(c.device);
    if (c.stream) cudaStreamSynchronize(c.stream), cudaStreamDestroy(c.stream);
    if (c.fusion) cudaFree(c.fusion);
    if (c.comm) ncclCommDestroy(c.comm);
  }
  comms_.clear();
}

Status NcclType(DataType dtype, ncclDataType_t* out) {
  switch (dtype) {
    case DataType::UINT8: *out = ncclUint8; break;
    case DataType::INT8: *out = ncclInt8; break;
    case DataType::INT32: *out = ncclInt32; break;
    case DataType::INT64: *out = ncclInt64; break;
    case DataType::FLOAT16: *out = ncclFloat16; break;
    case DataType::FLOAT32: *out = ncclFloat32; break;
    case DataType::FLOAT64: *out = ncclFloat64; break;
    case DataType::BFLOAT16: *out = ncclBfloat16; break;
    default:
      return Status::InvalidArgument(std::string("tfring: NCCL cannot reduce dtype ") + DataTypeName(dtype) +
                                     " on GPU; cast the tensor (e.g. to int32) or reduce it on the CPU");
  }
  return Status::OK();
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::MIN: return ncclMin;
    case ReduceOp::MAX: return ncclMax;
    case ReduceOp::PRODUCT: return ncclProd;
    default: return ncclSum;
  }
}

}  // namespace tfring
