// Online tuning of the fusion threshold, the cycle time and, on jobs spanning hosts, hierarchical allreduce
// (TFRING_AUTOTUNE=1). Runs on rank 0 only: it scores
// each candidate setting by the collective bytes per second the job achieved while it was in force, and hands
// every new setting to the controller, which ships it to all ranks inside a negotiated response list (so all
// ranks switch at the same cycle and keep fusing identically). Coordinate search: the fusion threshold first
// (at the starting cycle time), then the cycle time at the best threshold, then hierarchical allreduce off/on
// (when offered); then it keeps the best setting.
// Framework- and MPI-free: unit-tested with a fake clock.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace tfring {

struct TunedParams {
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  int hierarchical = 0;  // bit 0: hierarchical allreduce, bit 1: hierarchical allgather (tuned: bit 0 only)
  bool operator==(const TunedParams& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes && cycle_time_ms == o.cycle_time_ms &&
           hierarchical == o.hierarchical;
  }
};

struct AutotuneOptions {
  std::vector<int64_t> fusion_candidates = {1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20};
  std::vector<double> cycle_candidates = {0.5, 1, 2, 5};
  bool tune_hierarchical = false;  // the runtime offers it when the job spans hosts and a host has several ranks
  double sample_seconds = 1;       // one score = bytes over at least this much time...
  int64_t min_sample_bytes = 1;    // ...and at least this many bytes (idle time is not scored)
  int warmup_samples = 1;          // discarded after every switch (caches, allocator warm-up)
  int samples_per_candidate = 3;   // the candidate's score is the median of these (this machine is noisy)
  std::string log_path;            // CSV; empty = no log
};

class Autotuner {
 public:
  Autotuner(TunedParams start, AutotuneOptions options);
  // After each cycle: the bytes the cycle's collectives moved, and the time (seconds) the cycle ended.
  void Record(int64_t bytes, double now);
  // A setting to apply on every rank, if one was decided since the last call.
  bool TakeProposal(TunedParams* out);
  bool done() const { return phase_ == DONE; }
  TunedParams best() const { return best_; }
  TunedParams current() const { return current_; }

 private:
  enum Phase { FUSION = 0, CYCLE = 1, HIERARCHICAL = 2, DONE = 3 };
  void Propose(const TunedParams& p);
  void FinishCandidate(double score);
  void NextPhaseIfDone();
  void Log(const char* event, double score);

  AutotuneOptions options_;
  Phase phase_ = FUSION;
  size_t index_ = 0;  // candidate within the phase
  TunedParams current_, best_;
  double fusion_phase_cycle_;  // the cycle time every threshold was measured at
  double best_score_ = -1;
  std::vector<double> scores_;  // of the current candidate
  int warmup_left_;
  bool window_open_ = false;
  double window_start_ = 0;
  int64_t window_bytes_ = 0;
  bool has_proposal_ = false;
  TunedParams proposal_;
  std::ofstream log_;
};

}  // namespace tfring
