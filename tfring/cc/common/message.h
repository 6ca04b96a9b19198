// Negotiation messages and their byte codec. A Request says "rank r has tensor `name` ready with these
// parameters"; a Response is the coordinator's decision that every rank must execute identically.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "status.h"
#include "types.h"

namespace tfring {

struct Request {
  int32_t rank = 0;
  std::string name;
  OpType op = OpType::ALLREDUCE;
  DataType dtype = DataType::FLOAT32;
  ReduceOp reduce_op = ReduceOp::SUM;
  int32_t root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  Shape shape;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  int32_t device = -1;          // -1: host memory (MPI); else the GPU ordinal holding the tensor (NCCL)
};

struct RequestList {
  std::vector<Request> requests;
  bool shutdown = false;
};

struct Response {
  enum Kind : uint8_t { OK = 0, ERROR = 1 };
  Kind kind = OK;
  OpType op = OpType::ALLREDUCE;
  std::vector<std::string> names;
  DataType dtype = DataType::FLOAT32;
  ReduceOp reduce_op = ReduceOp::SUM;
  int32_t root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  // allreduce: element count per name (joined ranks allocate zeros from it);
  // allgather: first dimension of every rank; alltoall: size x size split matrix (row = sender);
  // reducescatter: element count of the whole input.
  std::vector<int64_t> sizes;
  Shape shape;         // the common shape (allreduce, broadcast, reducescatter) or trailing dims
  int32_t joined = 0;  // ranks that had joined when this was decided (they contribute zeros)
  int32_t last_joined_rank = -1;
  std::vector<int32_t> devices;  // empty: a CPU collective; else every rank's GPU (keys the NCCL communicator)
  std::string error;
  // ERROR responses: a StatusCode. Ranks disagreeing is PRECONDITION_ERROR (Horovod's FailedPrecondition), a bad
  // argument every rank can see is INVALID_ARGUMENT, a stalled collective DEADLINE_EXCEEDED.
  uint8_t error_code = static_cast<uint8_t>(StatusCode::PRECONDITION_ERROR);
};

struct ResponseList {
  std::vector<Response> responses;
  bool shutdown = false;
  bool cacheable = true;       // false while any rank is joined: joined ranks hold no request to cache
  std::string stall_report;    // the stall inspector's warning, logged by every rank
  int32_t shutdown_rank = -1;  // lowest rank that asked to shut down
  // Autotune: a new fusion threshold / cycle time decided by rank 0, applied by every rank from this cycle on
  // (-1: unchanged). Shipped here so all ranks switch at the same cycle and fuse identically.
  int64_t tuned_fusion_threshold = -1;
  double tuned_cycle_time_ms = -1;
  int32_t tuned_hierarchical = -1;  // TunedParams::hierarchical bits
};

std::string Encode(const RequestList& list);
Status Decode(const std::string& bytes, RequestList* list);
std::string Encode(const ResponseList& list);
Status Decode(const std::string& bytes, ResponseList* list);

// Do two requests of the same rank carry the same parameters (cache hit test)?
bool SameParameters(const Request& a, const Request& b);

}  // namespace tfring
