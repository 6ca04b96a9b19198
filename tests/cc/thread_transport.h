// Ranks as threads: the three collectives negotiation needs, over shared memory and a barrier.
#pragma once
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "../../tfring/cc/common/transport.h"

namespace tfring {

class Hub {
 public:
  explicit Hub(int n) : n_(n), bits_(n), strs_(n) {}
  void Barrier() {
    std::unique_lock<std::mutex> lock(mu_);
    uint64_t gen = gen_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen; });
    }
  }
  int n_;
  std::vector<std::vector<uint64_t>> bits_;
  std::vector<std::string> strs_;
  std::string bcast_;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t gen_ = 0;
};

class ThreadTransport : public Transport {
 public:
  ThreadTransport(Hub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_.n_; }
  Status AllreduceBitAnd(std::vector<uint64_t>* bits) override {
    hub_.bits_[rank_] = *bits;
    hub_.Barrier();
    for (int r = 0; r < hub_.n_; ++r) {
      if (hub_.bits_[r].size() != bits->size()) return Status::Unknown("bit vector length differs across ranks");
      for (size_t i = 0; i < bits->size(); ++i) (*bits)[i] &= hub_.bits_[r][i];
    }
    hub_.Barrier();
    return Status::OK();
  }
  Status GatherToRoot(const std::string& mine, std::vector<std::string>* all) override {
    hub_.strs_[rank_] = mine;
    hub_.Barrier();
    all->clear();
    if (rank_ == 0) *all = hub_.strs_;
    hub_.Barrier();
    return Status::OK();
  }
  Status BroadcastFromRoot(std::string* bytes) override {
    if (rank_ == 0) hub_.bcast_ = *bytes;
    hub_.Barrier();
    *bytes = hub_.bcast_;
    hub_.Barrier();
    return Status::OK();
  }

 private:
  Hub& hub_;
  int rank_;
};

}  // namespace tfring
