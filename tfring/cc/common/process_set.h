// Process sets: subsets of the ranks that run collectives among themselves. Each set a rank belongs to has its
// own communicator (backend), queue and controller (negotiation with its own coordinator, cache and stall
// inspector), so sets never wait for each other's tensors. Set 0 is every rank. The table is identical on every
// rank: sets are created and removed by collectives of the global set, in the same order everywhere.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "controller.h"
#include "ops/backend.h"
#include "tensor_queue.h"

namespace tfring {

struct ProcessSet {
  int id = 0;
  std::vector<int> ranks;              // global ranks, ascending
  Backend* backend = nullptr;          // null on ranks outside the set
  std::unique_ptr<Backend> owned;      // the subset's backend (the global set's belongs to the runtime)
  std::unique_ptr<TensorQueue> queue;  // members only
  std::unique_ptr<Controller> controller;
  Topology topology;    // members: within the set; kept so queries never touch the backend
  bool failed = false;  // its negotiation failed: no more cycles (background thread only)
  bool included() const { return controller != nullptr; }
  int rank_in_set(int global_rank) const;  // -1 if not a member
  SetLabel label() const;
};

class ProcessSetTable {
 public:
  std::shared_ptr<ProcessSet> Get(int id) const;
  std::vector<std::shared_ptr<ProcessSet>> All() const;  // ascending id
  // The lowest free id: every rank computes the same one, so ids need no message (removed ids are reused).
  int NextId() const;
  int Find(const std::vector<int>& ranks) const;  // id of the set with exactly these ranks, or -1
  void Put(std::shared_ptr<ProcessSet> set);
  std::shared_ptr<ProcessSet> Remove(int id);
  void Clear();

 private:
  mutable std::mutex mu_;
  std::map<int, std::shared_ptr<ProcessSet>> sets_;
};

}  // namespace tfring
