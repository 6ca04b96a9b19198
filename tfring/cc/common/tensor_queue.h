// Entries submitted by framework threads, waiting for negotiation and execution. Guarded by one mutex;
// the background thread drains new requests and takes entries by name once a Response names them.
#pragma once
#include <condition_variable>
#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor.h"

namespace tfring {

class TensorQueue {
 public:
  // Adds all entries atomically (a grouped op's members negotiate in the same cycle), moving them out of
  // `entries`. Fails without touching them if a name is already in flight on this rank.
  Status Add(std::vector<TensorEntry>& entries);
  Status Add(std::vector<TensorEntry>&& entries) { return Add(entries); }
  std::vector<Request> PopNewRequests();
  bool Take(const std::string& name, TensorEntry* out);
  const Request* Find(const std::string& name);  // only from the background thread
  // Wait until new requests arrive or the timeout passes: `cycle` while entries are outstanding, `idle` when
  // this rank has none. Returns true if new requests are pending.
  bool WaitForWork(std::chrono::microseconds cycle, std::chrono::microseconds idle);
  void Wake();
  // Remove every entry (shutdown); the caller fails them.
  std::vector<TensorEntry> DrainAll();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, TensorEntry> entries_;
  std::deque<Request> new_requests_;
  bool woken_ = false;
};

}  // namespace tfring
