// Chrome-trace (Perfetto) timeline written by rank 0: per tensor a track with its negotiation span (and each
// rank's ready mark when negotiated by the coordinator), then the execution phases (copy in, the MPI call, copy
// out). Optional cycle marks. Thread-safe: framework threads and the background thread both record.
#pragma once
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace tfring {

class Timeline {
 public:
  ~Timeline() { Stop(); }
  bool Start(const std::string& path, bool mark_cycles);
  void Stop();
  bool enabled() const { return file_ != nullptr; }
  bool mark_cycles() const { return mark_cycles_; }

  void NegotiateStart(const std::string& tensor, const char* op);
  void RankReady(const std::string& tensor, int rank);
  void NegotiateEnd(const std::string& tensor, bool cached);
  void ActivityStart(const std::vector<std::string>& tensors, const char* activity);
  void ActivityEnd(const std::vector<std::string>& tensors);
  void Cycle();

 private:
  int64_t Now() const;
  int TrackLocked(const std::string& tensor);
  void WriteLocked(const std::string& json);

  std::mutex mu_;
  std::FILE* file_ = nullptr;
  bool mark_cycles_ = false;
  bool first_ = true;
  std::chrono::steady_clock::time_point start_;
  std::unordered_map<std::string, int> tracks_;
};

// Scoped activity on a set of tensors (no-op when the timeline is off or null).
class TimelineActivity {
 public:
  TimelineActivity(Timeline* t, const std::vector<std::string>& tensors, const char* activity)
      : t_(t && t->enabled() ? t : nullptr), tensors_(tensors) {
    if (t_) t_->ActivityStart(tensors_, activity);
  }
  ~TimelineActivity() {
    if (t_) t_->ActivityEnd(tensors_);
  }

 private:
  Timeline* t_;
  const std::vector<std::string>& tensors_;
};

}  // namespace tfring
