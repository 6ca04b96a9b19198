#include "monitor.h"
#include "clock.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "codec.h"
#include "logging.h"
#include "timeline.h"

namespace tfring {
namespace {

double Now() { return SteadySeconds(); }

// Bytes a collective moves over the busiest link per byte of payload (nccl-tests' bus bandwidth factors).
double BusFactor(OpType op, int n) {
  if (n <= 1) return 0;
  switch (op) {
    case OpType::ALLREDUCE:
      return 2.0 * (n - 1) / n;
    case OpType::BROADCAST:
      return 1;
    default:
      return double(n - 1) / n;
  }
}

std::string Num(double v) {
  if (!std::isfinite(v)) return "null";  // keeps the JSON valid
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", v);
  return buf;
}

}  // namespace

Monitor::~Monitor() {
  if (metrics_) std::fclose(metrics_);
}

bool Monitor::Configure(const MonitorOptions& options, int rank, int size, Timeline* timeline, std::string* error) {
  if (metrics_) std::fclose(metrics_), metrics_ = nullptr;
  options_ = options;
  rank_ = rank, size_ = size, timeline_ = timeline;
  window_ = Window();
  window_.start = Now();
  window_.marks_at_start = marks_;
  covered_until_ = 0;
  history_.clear();
  pending_ = Record();
  warm_ = dropped_last_ = false;  // a new job (an elastic reset too) traces and compiles again
  recent_.clear();
  last_warned_.assign(size, -1e300);
  totals_.assign(size, Row());
  total_steps_ = inferred_steps_ = 0, straggler_ = slowest_ = -1, rounds_ = 0;
  marked_ever_ = false;
  last_written_ = -1e300;
  {
    std::lock_guard<std::mutex> lock(mu_);
    summary_.clear();
  }
  configured_ = true;
  if (rank == 0 && options.enabled && !options.metrics_file.empty()) {
    metrics_ = std::fopen(options.metrics_file.c_str(), metrics_opened_ ? "a" : "w");
    metrics_opened_ = true;
    if (!metrics_) {
      *error = "tfring: cannot open the metrics file '" + options.metrics_file + "' (TFRING_METRICS_FILE) for writing";
      return false;
    }
  }
  return true;
}

void Monitor::OnWait(double oldest_submit, double decided) {
  if (!options_.enabled) return;
  // Union of waiting intervals: only the part after what earlier cycles already counted.
  const double from = std::max(oldest_submit, covered_until_);
  if (decided > from) window_.wait += decided - from;
  covered_until_ = std::max(covered_until_, decided);
}

void Monitor::OnExecuted(const std::vector<std::string>& names, OpType op, int64_t bytes, int set_size,
                         double seconds) {
  if (!options_.enabled) return;
  window_.transfer += seconds;
  window_.collectives += 1;
  if (seconds > 0) window_.bus_bytes += bytes * BusFactor(op, set_size);  // GPU: asynchronous, not timed
  if (op == OpType::ALLREDUCE || op == OpType::REDUCESCATTER) window_.bytes_reduced += bytes;
  if (marks_ == window_.marks_at_start)  // only needed while nothing marks steps
    for (const auto& n : names)
      if (window_.names.size() < kMaxNames || window_.names.count(n)) ++window_.names[n];
}

double Monitor::Steps(bool* marked_window) const {
  // Explicit marks if the framework makes them, else how often the most frequent collective ran (each gradient
  // is reduced once per step).
  const int64_t marked = marks_ - window_.marks_at_start;
  if (marked_window) *marked_window = marked > 0;
  if (marked > 0) return static_cast<double>(marked);
  int64_t most = 0;
  for (const auto& kv : window_.names) most = std::max(most, kv.second);
  return static_cast<double>(most);
}

bool Monitor::WantRound() {
  if (!configured_) return false;
  if (flush_) return true;
  const bool timeline = timeline_ && timeline_->enabled();
  // Another rank: when its timeline buffer grows, or holds events after it stopped recording.
  if (rank_ != 0) return timeline_ && (timeline_->buffered() >= (4u << 20) || (!timeline && timeline_->buffered()));
  if (!options_.enabled && !timeline) return false;
  const double elapsed = Now() - window_.start;
  return elapsed >= options_.interval_seconds || (elapsed >= 0.05 && Steps() >= kRoundSteps);
}

std::string Monitor::Encode(int64_t sync_us) {
  Writer w;
  w.Put<int64_t>(sync_us);
  w.Put<double>(Steps(&encoded_marked_));
  w.Put<double>(Now() - window_.start);
  w.Put<double>(window_.wait);
  w.Put<double>(window_.transfer);
  w.Put<double>(window_.bus_bytes);
  w.Put<int64_t>(window_.bytes_reduced);
  w.Put<int64_t>(window_.collectives);
  // Bounded per round, so the gather stays far below MPI's int counts however many ranks ship.
  const size_t limit = std::max<size_t>(64 << 10, std::min<size_t>(4 << 20, (size_t(1) << 30) / size_));
  w.PutString(timeline_ ? timeline_->TakeShipment(limit) : std::string());
  return w.Take();
}

void Monitor::Collect(const std::vector<std::string>& all, std::vector<Row>* rows, double* steps, double* wall) {
  int64_t sync0 = 0;
  rows->assign(all.size(), Row());
  for (size_t r = 0; r < all.size(); ++r) {
    Reader rd(all[r]);
    int64_t sync = 0;
    double s = 0, w = 0;
    std::string events;
    Row& row = (*rows)[r];
    if (!rd.Get(&sync) || !rd.Get(&s) || !rd.Get(&w) || !rd.Get(&row.wait) || !rd.Get(&row.transfer) ||
        !rd.Get(&row.bus_bytes) || !rd.Get(&row.bytes_reduced) || !rd.Get(&row.collectives) || !rd.GetString(&events)) {
      // Never leave the round early: the other ranks already wait in its broadcast.
      TFR_LOG(TFR_WARNING, "tfring monitor: unreadable statistics from rank " << r << "; counted as zero");
      row = Row();
      continue;
    }
    if (r == 0) sync0 = sync, *steps = s, *wall = w;
    // Every rank read its clock right after the same AND returned: the difference is the clock offset.
    if (timeline_) timeline_->WriteShipment(static_cast<int>(r), events, sync - sync0);
  }
}

bool Monitor::IsWarmUp(const Record& record) {
  // The round that holds the first step waits for every rank's tracing and compiling, which takes each rank a
  // different time and is not straggling (it would outweigh a real straggler's evidence for its first 20 steps).
  if (!warm_) return warm_ = true;
  // So does a later recompile: a round whose steps take far longer than the median of the last rounds (this one
  // included, left out or not). Never two in a row, and a slowdown that stays moves the median: a rank that turns
  // slow for good is judged at most a round later.
  const double mine = record.wall / record.steps;
  recent_.push_back(mine);
  if (recent_.size() > 5) recent_.pop_front();
  const bool was_dropped = dropped_last_;
  dropped_last_ = false;
  if (was_dropped || recent_.size() < 4) return false;
  std::vector<double> sorted(recent_.begin(), recent_.end());
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  const double median = sorted[sorted.size() / 2];
  return dropped_last_ = mine > kRecompileFactor * median && mine - median > kRecompileSeconds;
}

void Monitor::Judge(const std::vector<Row>& rows, double steps, double wall) {
  pending_.wait.resize(rows.size(), 0);
  for (size_t r = 0; r < rows.size(); ++r) pending_.wait[r] += rows[r].wait;
  pending_.wall += wall;
  if (steps <= 0) return;  // a round inside a long step: its waiting counts with the next step
  pending_.steps = steps;
  const Record record = pending_;
  pending_ = Record();
  if (IsWarmUp(record)) return;
  history_.push_back(record);
  double total = 0;
  for (const Record& h : history_) total += h.steps;
  // The evidence: the last straggler_steps steps, but never fewer than the 3 rounds a verdict needs.
  while (history_.size() > kMaxHistory ||
         (history_.size() > 3 && total - history_.front().steps >= options_.straggler_steps))
    total -= history_.front().steps, history_.pop_front();
  // The rank that waited least over the evidence, and what the others waited beyond it, per step.
  const int n = size_;
  auto excess = [n](const std::vector<double>& wait, int s) {
    double others = 0;
    for (int j = 0; j < n; ++j)
      if (j != s) others += wait[j];
    return others / (n - 1) - wait[s];
  };
  std::vector<double> sum(n, 0);
  double sum_wall = 0;
  for (const Record& h : history_) {
    for (int j = 0; j < n; ++j) sum[j] += h.wait[j];
    sum_wall += h.wall;
  }
  const int s = static_cast<int>(std::min_element(sum.begin(), sum.end()) - sum.begin());
  slowest_ = s;
  slowest_ms_ = 1000 * excess(sum, s) / total;
  // Named only if it was last in each of the last 3 rounds, by more than the threshold every time.
  bool persistent = history_.size() >= 3 && total >= std::min<double>(options_.straggler_steps, 10);
  for (size_t k = history_.size() >= 3 ? history_.size() - 3 : 0; persistent && k < history_.size(); ++k) {
    const Record& h = history_[k];
    const double per_step = 1000 * excess(h.wait, s) / h.steps;
    const int last = static_cast<int>(std::min_element(h.wait.begin(), h.wait.end()) - h.wait.begin());
    persistent = last == s && per_step >= std::max(options_.straggler_min_ms, 100 * h.wall / h.steps);
  }
  const double step_ms = 1000 * sum_wall / total;
  persistent = persistent && slowest_ms_ >= std::max(options_.straggler_min_ms, 0.1 * step_ms);
  straggler_ = persistent ? s : -1;
  straggler_ms_ = persistent ? slowest_ms_ : 0;
  evidence_steps_ = total;
  const double now = Now();
  if (persistent && options_.stragglers && now - last_warned_[s] >= options_.warn_seconds) {
    last_warned_[s] = now;
    TFR_LOG(TFR_WARNING, "tfring: rank " << s << " is a straggler: the others waited " << static_cast<int>(slowest_ms_)
                                         << " ms per step for it over the last " << static_cast<int>(total)
                                         << " steps (a step takes " << static_cast<int>(step_ms) << " ms)");
  }
}

std::string Monitor::Format(const std::vector<Row>& rows, double steps, double wall) const {
  const double per = steps > 0 ? steps : 1;
  std::string j = "{\"time\":" + Num(static_cast<double>(std::time(nullptr))) +
                  ",\"round\":" + std::to_string(rounds_) + ",\"round_ms\":" + Num(round_ms_) +
                  ",\"size\":" + std::to_string(size_) + ",\"steps\":" + Num(steps) + ",\"seconds\":" + Num(wall) +
                  ",\"step_ms\":" + (steps > 0 ? Num(1000 * wall / steps) : "null") +
                  ",\"total_steps\":" + Num(total_steps_) + ",\"ranks\":[";
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& w = rows[r];
    const Row& t = totals_[r];
    j += std::string(r ? "," : "") + "{\"rank\":" + std::to_string(r) + ",\"wait_ms\":" + Num(1000 * w.wait) +
         ",\"wait_ms_per_step\":" + Num(1000 * w.wait / per) + ",\"transfer_ms\":" + Num(1000 * w.transfer) +
         ",\"bytes_reduced\":" + std::to_string(w.bytes_reduced) + ",\"collectives\":" + std::to_string(w.collectives) +
         ",\"busbw_gbps\":" + Num(w.transfer > 0 ? w.bus_bytes / w.transfer / 1e9 : 0) +
         ",\"total\":{\"wait_s\":" + Num(t.wait) + ",\"transfer_s\":" + Num(t.transfer) +
         ",\"bytes_reduced\":" + std::to_string(t.bytes_reduced) + ",\"collectives\":" + std::to_string(t.collectives) +
         ",\"busbw_gbps\":" + Num(t.transfer > 0 ? t.bus_bytes / t.transfer / 1e9 : 0) + "}}";
  }
  j += "],\"slowest\":";
  j += slowest_ >= 0 ? "{\"rank\":" + std::to_string(slowest_) + ",\"waited_ms_per_step\":" + Num(slowest_ms_) + "}"
                     : "null";
  j += ",\"straggler\":";
  j += straggler_ >= 0 ? "{\"rank\":" + std::to_string(straggler_) + ",\"waited_ms_per_step\":" + Num(straggler_ms_) +
                             ",\"steps\":" + Num(evidence_steps_) + "}"
                       : "null";
  return j + "}";
}

Status Monitor::Round(Transport& transport, bool last) {
  const int64_t sync_us = Timeline::NowUs();
  const double began = Now();
  flush_ = false;  // a request made from now on gets the next round
  ++started_;
  std::vector<std::string> all;
  TFR_RETURN_IF_ERROR(transport.GatherToRoot(Encode(sync_us), &all));
  std::string summary;
  if (rank_ == 0) {
    std::vector<Row> rows;
    double steps = 0, wall = 0;
    Collect(all, &rows, &steps, &wall);
    ++rounds_;
    // A job that marks steps has its steps counted by marks only: the steps inferred from collectives before its
    // first mark (a round inside the first step) are taken back.
    if (encoded_marked_ && !marked_ever_) total_steps_ -= inferred_steps_, marked_ever_ = true;
    if (!encoded_marked_) inferred_steps_ += steps;
    total_steps_ += steps;
    for (size_t r = 0; r < rows.size() && r < totals_.size(); ++r) {
      Row& t = totals_[r];
      t.wait += rows[r].wait, t.transfer += rows[r].transfer, t.bus_bytes += rows[r].bus_bytes;
      t.bytes_reduced += rows[r].bytes_reduced, t.collectives += rows[r].collectives;
    }
    if (size_ > 1 && options_.enabled) Judge(rows, steps, wall);
    if (options_.enabled) summary = Format(rows, steps, wall);
    const double now = Now();
    if (metrics_ && (last || now - last_written_ >= options_.interval_seconds)) {
      std::fprintf(metrics_, "%s\n", summary.c_str());
      std::fflush(metrics_);
      last_written_ = now;
    }
  }
  TFR_RETURN_IF_ERROR(transport.BroadcastFromRoot(&summary));
  {
    std::lock_guard<std::mutex> lock(mu_);
    summary_ = std::move(summary);
  }
  window_ = Window();
  window_.start = Now();
  window_.marks_at_start = marks_;
  ++done_;
  round_ms_ = 1000 * (Now() - began);
  return Status::OK();
}

std::string Monitor::Summary() {
  std::lock_guard<std::mutex> lock(mu_);
  return summary_;
}

}  // namespace tfring
