#include "completion_queue.h"

#include <chrono>

namespace tfring {

CompletionQueue::CompletionQueue(double timeout_seconds, std::function<void(const std::string&)> on_timeout)
    : timeout_seconds_(timeout_seconds), on_timeout_(std::move(on_timeout)), thread_(&CompletionQueue::Run, this) {}

CompletionQueue::~CompletionQueue() { Drain(); }

void CompletionQueue::Push(Item item) {
  std::unique_lock<std::mutex> lock(mu_);
  if (broken_) {  // the backend should have refused; fail rather than wait on an aborted communicator
    lock.unlock();
    Finish(item, Status::Aborted(broken_reason_));
    return;
  }
  items_.push_back(std::move(item));
  cv_.notify_one();
}

bool CompletionQueue::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void CompletionQueue::Drain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void CompletionQueue::Finish(Item& item, const Status& status) {
  for (auto& e : item.entries)
    if (e.callback) e.callback(status);
}

void CompletionQueue::Run() {
  using Clock = std::chrono::steady_clock;
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !items_.empty(); });
      if (items_.empty()) return;  // stop requested and nothing left
      item = std::move(items_.front());
      items_.pop_front();
    }
    // Items complete in stream order, so polling the oldest one is enough. Back off from 20 us to 1 ms:
    // short collectives finish within a few polls; long ones cost no CPU while the GPU works.
    const auto start = Clock::now();
    auto pause = std::chrono::microseconds(20);
    std::string error;
    Probe p;
    while ((p = item.probe(&error)) == RUNNING) {
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      if (timeout_seconds_ > 0 && waited > timeout_seconds_) break;
      std::this_thread::sleep_for(pause);
      if (pause < std::chrono::milliseconds(1)) pause *= 2;
    }
    if (p == DONE) {
      Finish(item, Status::OK());
      continue;
    }
    std::string names;
    for (const auto& n : item.names) names += (names.empty() ? "" : ", ") + n;
    const std::string why = p == FAILED
                                ? "tfring: GPU collective on [" + names + "] failed: " + error
                                : "tfring: GPU collective on [" + names + "] did not finish within " +
                                      std::to_string(static_cast<int>(timeout_seconds_)) +
                                      " s (TFRING_GPU_TIMEOUT_SECONDS); a rank may have died or stopped submitting";
    std::deque<Item> rest;
    {
      // Broken first, so the backend refuses new work before the communicators go away.
      std::lock_guard<std::mutex> lock(mu_);
      broken_ = true;
      broken_reason_ = why;
      rest.swap(items_);
    }
    // The abort must also stop queued kernels before any callback lets TF reuse their buffers.
    if (on_timeout_) on_timeout_(why);
    Finish(item, Status::Aborted(why));
    for (auto& r : rest) Finish(r, Status::Aborted(why));
  }
}

}  // namespace tfring
