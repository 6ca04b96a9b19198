// One negotiation cycle, identical on every rank: a bit-vector AND over the response cache (fast path),
// then, only if some rank has new or changed requests, a gather to the coordinator and a broadcast of
// its decisions. Output: the responses every rank executes, in the same order.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "autotune.h"
#include "coordinator.h"
#include "monitor.h"
#include "response_cache.h"
#include "tensor_queue.h"
#include "transport.h"

namespace tfring {

struct ControllerOptions {
  int64_t cache_capacity = 1024;
  StallOptions stall;            // stall.clock also times cached requests, which are demoted to a full round after
                                 // min(1 s, warn time) so the coordinator can see (and report) them
  Timeline* timeline = nullptr;  // rank 0's, or null
  SetLabel set;                  // the process set this controller negotiates for (messages name it)
  Monitor* monitor = nullptr;    // the global set's: its rounds ride on this set's cycles
};

class Controller {
 public:
  Controller(Transport& transport, TensorQueue& queue, ControllerOptions options);
  Status ComputeResponseList(bool shutdown, ResponseList* out);
  uint64_t full_rounds() const { return full_rounds_; }
  // Rank 0 (autotune): ship these parameters to every rank in the next cycle (forces a full round).
  void ProposeParameters(const TunedParams& p) { proposal_ = p, has_proposal_ = true; }

 private:
  // One cycle's working state, passed between its steps.
  struct Cycle {
    bool stall_on = false;
    double now = 0;
    std::vector<Request> uncached;  // negotiated in full this cycle
    std::set<uint32_t> invalid;     // cache positions this rank wants dropped
    std::vector<uint64_t> bits;     // [flags][ready bits][valid bits], ANDed over ranks
    uint32_t nbits = 0;
    size_t words = 0;
  };
  void DemoteStaleHits(Cycle* c);  // hits waiting too long go back to a full round
  void CollectRequests(Cycle* c);  // new requests: cache hits wait for their bit, the rest go in full
  void EncodeBits(bool shutdown, Cycle* c);
  bool DropInvalidated(Cycle* c);  // after the AND: entries any rank invalidated; true if any
  void TakeReadyHits(bool any_joined, Cycle* c, ResponseList* out);  // hits ready on every rank
  void MergeDecided(ResponseList decided, ResponseList* out);        // the full round's decisions
  Status FullRound(std::vector<Request> uncached, bool shutdown, ResponseList* decided);
  void CacheDecided(const ResponseList& decided);

  Transport& transport_;
  TensorQueue& queue_;
  ResponseCache cache_;
  std::unique_ptr<Coordinator> coordinator_;  // rank 0 only
  ControllerOptions options_;
  double last_full_round_ = 0;
  std::map<uint32_t, std::pair<Request, double>> cached_pending_;  // cache hits waiting for every rank's bit
  std::vector<Request> resend_;  // hits whose cache entry went away: negotiate in full
  bool joined_ = false;          // this rank called join() and it has not completed
  uint64_t full_rounds_ = 0;
  bool has_proposal_ = false;
  TunedParams proposal_;
};

}  // namespace tfring
