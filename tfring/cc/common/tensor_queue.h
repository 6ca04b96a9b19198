// Entries submitted by framework threads, waiting for negotiation and execution. Guarded by one mutex;
// the background thread drains new requests and takes entries by name once a Response names them.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor.h"

namespace tfring {

// Wakes the background thread. Every process set's queue signals the same one, so one thread waits for all.
class WorkSignal {
 public:
  void Notify();
  // Until notified or `timeout` passes; clears the notification.
  void Wait(std::chrono::microseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool pending_ = false;
};

class TensorQueue {
 public:
  explicit TensorQueue(std::shared_ptr<WorkSignal> signal = std::make_shared<WorkSignal>())
      : signal_(std::move(signal)) {}
  // Adds all entries atomically (a grouped op's members negotiate in the same cycle), moving them out of
  // `entries`. Fails without touching them if a name is already in flight on this rank.
  Status Add(std::vector<TensorEntry>& entries);
  Status Add(std::vector<TensorEntry>&& entries) { return Add(entries); }
  std::vector<Request> PopNewRequests();
  bool Take(const std::string& name, TensorEntry* out);
  const Request* Find(const std::string& name);  // only from the background thread
  bool HasEntries();                             // outstanding entries (submitted, not yet taken)
  // Exactly one submission (one op, or one grouped op) outstanding, made since the last PopNewRequests: nothing
  // waits for other ranks, and no burst is arriving (two or more submissions keep the cycle spacing).
  bool OneNewSubmission();
  // Remove every entry (shutdown); the caller fails them.
  std::vector<TensorEntry> DrainAll();
  // DrainAll, and refuse later Adds with `why` (a removed process set).
  std::vector<TensorEntry> Close(const Status& why);

 private:
  std::shared_ptr<WorkSignal> signal_;
  std::mutex mu_;
  std::unordered_map<std::string, TensorEntry> entries_;
  std::deque<Request> new_requests_;
  Status closed_;  // not OK once closed
  int adds_since_pop_ = 0;
};

}  // namespace tfring
