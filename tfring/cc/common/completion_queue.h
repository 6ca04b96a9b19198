// Completes asynchronous (GPU) collectives in submission order on one thread of its own: polls each item's
// completion probe, then runs its callbacks. Every item has a deadline; past it `on_timeout` runs (the NCCL
// backend aborts its communicator there) and the item and everything queued behind it fail with a message
// naming the tensors. Framework- and CUDA-free so its logic is unit-tested without a GPU.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "status.h"
#include "tensor.h"

namespace tfring {

class CompletionQueue {
 public:
  enum Probe { RUNNING = 0, DONE = 1, FAILED = 2 };
  struct Item {
    std::vector<std::string> names;
    std::function<Probe(std::string* error)> probe;  // non-blocking
    std::vector<TensorEntry> entries;                // kept alive until the callbacks ran
  };

  // timeout_seconds <= 0: no deadline.
  CompletionQueue(double timeout_seconds, std::function<void(const std::string& why)> on_timeout);
  ~CompletionQueue();
  void Push(Item item);
  // Stops after the queued items completed or failed (their deadline still applies).
  void Drain();
  // True once a deadline passed or a probe failed: the backend must refuse new work.
  bool broken() const;

 private:
  void Run();
  void Finish(Item& item, const Status& status);

  const double timeout_seconds_;
  std::function<void(const std::string&)> on_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool stop_ = false, broken_ = false;
  std::string broken_reason_;
  std::thread thread_;
};

}  // namespace tfring
