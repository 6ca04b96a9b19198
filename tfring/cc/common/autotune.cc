#include "autotune.h"

#include <algorithm>

namespace tfring {

Autotuner::Autotuner(TunedParams start, AutotuneOptions options)
    : options_(std::move(options)),
      current_(start),
      best_(start),
      fusion_phase_cycle_(start.cycle_time_ms),
      warmup_left_(options_.warmup_samples) {
  if (!options_.log_path.empty()) {
    log_.open(options_.log_path, std::ios::out | std::ios::trunc);
    log_ << "event,fusion_threshold_bytes,cycle_time_ms,bytes_per_second,hierarchical\n";
    log_.flush();
  }
  if (options_.fusion_candidates.empty() || options_.cycle_candidates.empty()) {
    phase_ = DONE;
    return;
  }
  TunedParams first = current_;
  first.fusion_threshold_bytes = options_.fusion_candidates[0];
  Propose(first);
}

void Autotuner::Propose(const TunedParams& p) {
  current_ = p;
  proposal_ = p;
  has_proposal_ = true;
  scores_.clear();
  warmup_left_ = options_.warmup_samples;
  window_open_ = false;
}

bool Autotuner::TakeProposal(TunedParams* out) {
  if (!has_proposal_) return false;
  *out = proposal_;
  has_proposal_ = false;
  return true;
}

void Autotuner::Log(const char* event, double score) {
  if (!log_.is_open()) return;
  log_ << event << "," << current_.fusion_threshold_bytes << "," << current_.cycle_time_ms << "," << score << ","
       << current_.hierarchical << "\n";
  log_.flush();
}

void Autotuner::Record(int64_t bytes, double now) {
  if (phase_ == DONE || has_proposal_) return;  // nothing to score until the proposal is in force everywhere
  if (bytes <= 0 && !window_open_) return;      // windows start with work, so idle periods before it don't count
  if (!window_open_) {
    window_open_ = true;
    window_start_ = now;
    window_bytes_ = 0;
    return;  // this cycle's bytes were moved before the window's start time: don't count them
  }
  window_bytes_ += bytes;
  const double elapsed = now - window_start_;
  // Windows open and close on cycles that moved bytes, i.e. at the end of a training step's communication, so
  // a window holds whole steps: closing in the compute gap would count a partial step and add noise.
  if (bytes <= 0 || elapsed < options_.sample_seconds || window_bytes_ < options_.min_sample_bytes) return;
  const double score = window_bytes_ / elapsed;
  window_open_ = false;
  if (warmup_left_ > 0) {
    --warmup_left_;
    Log("warmup", score);
    return;
  }
  Log("sample", score);
  scores_.push_back(score);
  if (static_cast<int>(scores_.size()) < options_.samples_per_candidate) return;
  std::vector<double> s = scores_;
  std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
  FinishCandidate(s[s.size() / 2]);
}

void Autotuner::FinishCandidate(double score) {
  Log("candidate", score);
  if (score > best_score_) best_score_ = score, best_ = current_;
  ++index_;
  NextPhaseIfDone();
  if (phase_ == DONE) {
    current_ = best_;
    Log("best", best_score_);
    proposal_ = best_;
    has_proposal_ = true;
    return;
  }
  TunedParams next = phase_ == FUSION ? current_ : best_;
  if (phase_ == FUSION)
    next.fusion_threshold_bytes = options_.fusion_candidates[index_];
  else if (phase_ == CYCLE)
    next.cycle_time_ms = options_.cycle_candidates[index_];
  else
    next.hierarchical = best_.hierarchical ^ 1;  // the other allreduce path; the best one has its score
  Propose(next);
}

void Autotuner::NextPhaseIfDone() {
  if (phase_ == FUSION && index_ >= options_.fusion_candidates.size()) phase_ = CYCLE, index_ = 0;
  // The thresholds were measured at the starting cycle time: those pairs have scores already.
  while (phase_ == CYCLE && index_ < options_.cycle_candidates.size() &&
         options_.cycle_candidates[index_] == fusion_phase_cycle_)
    ++index_;
  if (phase_ == CYCLE && index_ >= options_.cycle_candidates.size())
    phase_ = options_.tune_hierarchical ? HIERARCHICAL : DONE, index_ = 0;
  if (phase_ == HIERARCHICAL && index_ >= 1) phase_ = DONE;  // one candidate: the path not yet measured
}

}  // namespace tfring
