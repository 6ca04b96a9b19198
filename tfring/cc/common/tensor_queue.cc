#include "tensor_queue.h"

namespace tfring {

void WorkSignal::Notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = true;
  }
  cv_.notify_one();
}

void WorkSignal::Wait(std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return pending_; });
  pending_ = false;
}

Status TensorQueue::Add(std::vector<TensorEntry>& entries) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_.ok()) return closed_;
    for (size_t i = 0; i < entries.size(); ++i) {
      const auto& name = entries[i].request.name;
      bool dup_in_batch = false;
      for (size_t j = 0; j < i; ++j) dup_in_batch |= entries[j].request.name == name;
      if (entries_.count(name) || dup_in_batch)
        return Status::InvalidArgument("tfring: a collective named '" + name +
                                       "' is already in flight on this rank; give concurrent collectives "
                                       "distinct names (argument name='" +
                                       name + "')");
    }
    ++adds_since_pop_;
    for (auto& e : entries) {
      new_requests_.push_back(e.request);
      std::string name = e.request.name;
      entries_.emplace(std::move(name), std::move(e));
    }
  }
  signal_->Notify();
  return Status::OK();
}

std::vector<Request> TensorQueue::PopNewRequests() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Request> out(new_requests_.begin(), new_requests_.end());
  new_requests_.clear();
  adds_since_pop_ = 0;
  return out;
}

bool TensorQueue::Take(const std::string& name, TensorEntry* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  *out = std::move(it->second);
  entries_.erase(it);
  return true;
}

const Request* TensorQueue::Find(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  // Entries are only erased by the background thread, which is the only caller, so the pointer stays valid.
  return it == entries_.end() ? nullptr : &it->second.request;
}

bool TensorQueue::HasEntries() {
  std::lock_guard<std::mutex> lock(mu_);
  return !entries_.empty();
}

bool TensorQueue::OneNewSubmission() {
  std::lock_guard<std::mutex> lock(mu_);
  // One request per entry until popped: equal sizes mean no entry was negotiated before.
  return adds_since_pop_ == 1 && entries_.size() == new_requests_.size();
}

std::vector<TensorEntry> TensorQueue::DrainAll() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TensorEntry> out;
  for (auto& kv : entries_) out.push_back(std::move(kv.second));
  entries_.clear();
  new_requests_.clear();
  adds_since_pop_ = 0;
  return out;
}

std::vector<TensorEntry> TensorQueue::Close(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = why;
  }
  return DrainAll();
}

}  // namespace tfring
