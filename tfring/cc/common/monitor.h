// What each rank spends waiting for the others, and who they wait for. Every rank measures, per window, the
// wall time during which something it submitted had not been decided yet (the union of those intervals: a burst
// of gradients waiting together counts once), its transfer time, bytes and bus bytes. In a "round" (requested
// by rank 0 through a flag of the cycle's bit-vector AND, so every rank of the global set takes part in the same
// cycle) the windows go to rank 0, which compares them: collectives complete at the same instant everywhere, so
// the rank that waited least arrived last, and the others' extra wait is the time it cost them. Rank 0 names a
// rank that arrives last in every recent round by more than the threshold (one warning per rank and interval),
// writes the metrics file, and broadcasts a JSON summary that every rank's Python API reads. The round also
// carries the other ranks' timeline events and the clock offset (taken right after the AND) that aligns them.
#pragma once
#include <atomic>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "status.h"
#include "transport.h"
#include "types.h"

namespace tfring {

class Timeline;

struct MonitorOptions {
  bool enabled = true;           // false: no accounting, no summary (rounds only ship timeline events)
  bool stragglers = true;        // rank 0 warns about stragglers
  double straggler_min_ms = 5;   // per-step cost below which no rank is named (also >= 10 % of the step)
  double warn_seconds = 60;      // at most one warning per rank in this time
  int64_t straggler_steps = 20;  // the evidence: the last this many steps
  double interval_seconds = 1;   // longest time between rounds; the metrics file gets a line at most this often
  std::string metrics_file;      // rank 0 appends a JSON line per interval (empty: none)
};

class Monitor {
 public:
  ~Monitor();
  // rank/size in the global set. False (with *error) if the metrics file cannot be opened.
  bool Configure(const MonitorOptions& options, int rank, int size, Timeline* timeline, std::string* error);
  void MarkStep() { ++marks_; }  // any thread: the framework says a training step ended
  // Any thread: asks for a round; returns the count of completed rounds that includes it (a round serves the
  // requests made before it started: Round clears the request, then counts itself started).
  uint64_t RequestRound() {
    flush_ = true;
    return started_ + 1;
  }
  uint64_t rounds_done() const { return done_; }

  // Background thread only.
  void OnWait(double oldest_submit, double decided);  // this cycle's responses: the oldest local submission
  void OnExecuted(const std::vector<std::string>& names, OpType op, int64_t bytes, int set_size, double seconds);
  bool WantRound();
  // Every rank of the global set in the same cycle. `last`: the job is shutting down (flushes the metrics file).
  Status Round(Transport& transport, bool last);

  std::string Summary();  // the latest round's JSON summary (any thread); "" before the first round

  static constexpr int kRoundSteps = 4;         // rank 0 asks for a round every this many of its steps
  static constexpr size_t kMaxNames = 1 << 16;  // distinct names counted per window (unnamed ones are numbered)
  static constexpr size_t kMaxHistory = 1000;
  // A round whose step takes this much over the median of the last 5 rounds, and this many seconds more (fast
  // steps' walls are noisy): a recompile (IsWarmUp).
  static constexpr double kRecompileFactor = 5, kRecompileSeconds = 0.2;

 private:
  struct Window {
    double start = 0, wait = 0, transfer = 0, bus_bytes = 0;
    int64_t bytes_reduced = 0, collectives = 0, marks_at_start = 0;
    std::unordered_map<std::string, int64_t> names;  // executions per name: steps when nothing marks them
  };
  struct Row {  // one rank's window, as rank 0 receives it
    double wait = 0, transfer = 0, bus_bytes = 0;
    int64_t bytes_reduced = 0, collectives = 0;
  };
  struct Record {  // one round at rank 0
    double steps = 0, wall = 0;
    std::vector<double> wait;
  };
  double Steps(bool* marked_window = nullptr) const;
  bool IsWarmUp(const Record& record);  // rank 0: a round left out of the evidence (first step, recompile)
  std::string Encode(int64_t sync_us);
  void Collect(const std::vector<std::string>& all, std::vector<Row>* rows, double* steps, double* wall);
  void Judge(const std::vector<Row>& rows, double steps, double wall);
  std::string Format(const std::vector<Row>& rows, double steps, double wall) const;

  MonitorOptions options_;
  int rank_ = 0, size_ = 1;
  Timeline* timeline_ = nullptr;
  std::atomic<int64_t> marks_{0};
  std::atomic<bool> flush_{false};
  std::atomic<uint64_t> started_{0}, done_{0};
  Window window_;
  double covered_until_ = 0;  // the waiting intervals' union so far ends here
  bool configured_ = false;
  // Rank 0.
  std::deque<Record> history_;
  Record pending_;  // rounds without a step: their waiting joins the next round that has one
  bool warm_ = false, dropped_last_ = false;
  std::deque<double> recent_;  // the last rounds' seconds per step (IsWarmUp)
  std::vector<double> last_warned_;
  std::vector<Row> totals_;
  double total_steps_ = 0, inferred_steps_ = 0;        // inferred: steps counted without a mark
  bool encoded_marked_ = false, marked_ever_ = false;  // this rank's last window had marks; any had
  int straggler_ = -1;
  double straggler_ms_ = 0, evidence_steps_ = 0, slowest_ms_ = 0;
  int slowest_ = -1;
  std::FILE* metrics_ = nullptr;
  bool metrics_opened_ = false;  // a re-init (elastic) appends to the file instead of truncating it
  double last_written_ = -1e300;
  uint64_t rounds_ = 0;
  double round_ms_ = 0;  // how long rank 0's previous round took (its whole cost, gather to broadcast)
  std::mutex mu_;
  std::string summary_;
};

}  // namespace tfring
