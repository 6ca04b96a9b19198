// One function per collective on GPU tensors, one file each. Each enqueues its work on c.stream (which already
// waits on the inputs' ready events) and returns; the caller records the completion event.
#pragma once
#include <vector>

#include "../../message.h"
#include "../../tensor.h"
#include "nccl_context.h"

namespace tfring {

using GpuEntries = std::vector<TensorEntry>;

Status NcclAllreduce(NcclComm& c, const Response& r, GpuEntries& entries);
Status NcclAllgather(NcclComm& c, const Response& r, GpuEntries& entries);
Status NcclBroadcast(NcclComm& c, const Response& r, GpuEntries& entries);
Status NcclAlltoall(NcclComm& c, const Response& r, GpuEntries& entries);
Status NcclReducescatter(NcclComm& c, const Response& r, GpuEntries& entries);

// Device-to-device copy on the communicator's stream (no-op when source and destination coincide).
Status CopyOnStream(NcclComm& c, void* dst, const void* src, size_t bytes);

}  // namespace tfring
