// Chrome-trace (Perfetto) timeline of every rank, written by rank 0 into one file: a process per rank, and in it
// a track per tensor with its negotiation span (from this rank's submission to the decision; with each rank's
// ready mark where rank 0 coordinated), then the execution phases (copy in, the MPI call, copy out). Optional
// cycle marks. Other ranks buffer their events; the monitor ships them to rank 0 in its rounds with the clock
// offset it measured, so the ranks' spans line up and who waits for whom is visible. With rank0_only, rank 0
// records alone (Horovod's form). Thread-safe: framework threads and the background thread both record.
#pragma once
#include <atomic>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tfring {

class Timeline {
 public:
  ~Timeline() { Stop(); }
  // Rank 0 opens `path`; another rank records into memory (`path` unused) until Stop.
  bool Start(const std::string& path, bool mark_cycles, int rank);
  void Stop();
  bool enabled() const { return on_; }
  bool mark_cycles() const { return mark_cycles_; }

  void NegotiateStart(const std::string& tensor, const char* op);
  void RankReady(const std::string& tensor, int rank);
  void NegotiateEnd(const std::string& tensor, bool cached);
  void ActivityStart(const std::vector<std::string>& tensors, const char* activity);
  void ActivityEnd(const std::vector<std::string>& tensors);
  void Cycle();

  // Another rank: its oldest events, encoded, up to about `limit` bytes (empty when there are none), and how many
  // bytes wait now. Events past kMaxBuffered are dropped and counted (the count travels with the next shipment).
  std::string TakeShipment(size_t limit);
  size_t buffered() const { return buffered_; }
  // Rank 0: writes `rank`'s shipment; offset_us: that rank's steady clock minus rank 0's.
  void WriteShipment(int rank, const std::string& bytes, int64_t offset_us);
  static int64_t NowUs();  // the steady clock, microseconds (the same clock on every process of a host)

  static constexpr size_t kMaxBuffered = 64 << 20;

 private:
  void Record(int64_t ts, const std::string& track, const std::string& tail);
  void WriteLocked(int rank, int64_t ts, const std::string& track, const std::string& tail);
  int TrackLocked(int rank, const std::string& track);
  void PutLocked(const std::string& json);

  std::mutex mu_;
  std::atomic<bool> on_{false};
  std::FILE* file_ = nullptr;  // rank 0
  int rank_ = 0;
  bool mark_cycles_ = false;
  bool first_ = true;
  int64_t start_us_ = 0;
  std::map<std::pair<int, std::string>, int> tracks_;  // (rank, tensor) -> tid; tid 0 holds the cycle marks
  std::map<int, bool> named_;                          // ranks whose process is named in the file
  std::deque<std::string> buffer_;                     // other ranks: encoded events waiting for a round
  std::atomic<size_t> buffered_{0};
  uint64_t dropped_ = 0;
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
