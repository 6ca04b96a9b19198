#include "coordinator.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include "labels.h"
#include "timeline.h"

namespace tfring {

std::string Coordinator::Described(const std::string& name) {
  const std::string label = TensorLabel(name);
  return "'" + name + "'" + (label.empty() ? "" : " (" + label + ")");
}

std::string Coordinator::WaitsOn(const std::vector<std::string>& oldest, const std::vector<int>& ranks, double now) {
  // What each missing rank is blocked on itself: the oldest name it submitted that still waits here (its cache
  // hits come here too once they wait a second). None: it is outside tfring (computing, loading data, or stuck
  // in its own code).
  constexpr size_t kNamed = 8;  // ranks described; the rest are counted
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size() && i < kNamed; ++i) {
    const int m = ranks[i];
    out << "; rank " << set_.Global(m);
    if (oldest[m].empty())
      out << " submitted no collective that is waiting (it is busy outside tfring)";
    else
      out << " waits itself on " << Described(oldest[m]) << " since " << static_cast<int>(now - first_seen_[oldest[m]])
          << " s";
  }
  if (ranks.size() > kNamed) out << "; and " << ranks.size() - kNamed << " more missing ranks";
  return out.str();
}

void Coordinator::InspectStalls(const std::vector<std::string>& waiting, ResponseList* out) {
  if (!stall_.clock || (stall_.warn_seconds <= 0 && stall_.shutdown_seconds <= 0)) return;
  const double now = stall_.clock();
  constexpr int kListed = 8;  // tensors named in one warning; the rest are counted
  std::ostringstream report;
  int reported = 0;
  std::vector<bool> reported_missing(size_, false);
  std::vector<std::string> failed;
  std::vector<std::string> oldest(size_);  // each rank's oldest waiting name (waiting is in first-arrival order)
  for (const std::string& name : waiting)
    for (const Request& r : table_[name])
      if (oldest[r.rank].empty()) oldest[r.rank] = name;
  for (const std::string& name : waiting) {
    const double age = now - first_seen_[name];
    const bool fail = stall_.shutdown_seconds > 0 && age >= stall_.shutdown_seconds;
    auto warned = last_warned_.find(name);
    const bool warn = stall_.warn_seconds > 0 && age >= stall_.warn_seconds &&
                      (warned == last_warned_.end() || now - warned->second >= stall_.warn_seconds);
    if (!fail && !warn) continue;
    const auto& reqs = table_[name];
    std::vector<bool> present(size_, false);
    for (const Request& r : reqs) present[r.rank] = true;
    std::ostringstream ready, missing;
    std::vector<int> absent;
    for (int i = 0; i < size_; ++i) {
      std::ostringstream& os = present[i] || joined_[i] ? ready : missing;
      os << (os.tellp() > 0 ? "," : "") << set_.Global(i);
      if (!present[i] && !joined_[i]) absent.push_back(i);
    }
    std::ostringstream line;
    line << "tensor " << Described(name) << " (" << OpTypeName(reqs[0].op) << ")" << set_.Where() << " waited "
         << static_cast<int>(age) << " s: submitted by ranks [" << ready.str() << "], missing ranks [" << missing.str()
         << "]";
    if (warn) {
      if (reported++ < kListed) report << (report.tellp() > 0 ? "; " : "") << line.str();
      for (int m : absent) reported_missing[m] = true;
      last_warned_[name] = now;
    }
    if (fail) {
      Response err = BuildResponse(name, {&reqs[0]}, 0, set_);
      err.kind = Response::ERROR;
      err.error_code = static_cast<uint8_t>(StatusCode::DEADLINE_EXCEEDED);
      err.error = "tfring: stalled collective: " + line.str() + WaitsOn(oldest, absent, now) +
                  "; failed after TFRING_STALL_SHUTDOWN_TIME_SECONDS=" + FormatNumber(stall_.shutdown_seconds) +
                  ". Ranks must submit the same collectives (check for "
                  "rank-dependent control flow, uneven data without join(), or a rank that died or hangs).";
      out->responses.push_back(err);
      failed.push_back(name);
    }
  }
  if (reported > 0) {
    std::vector<int> missing;
    for (int i = 0; i < size_; ++i)
      if (reported_missing[i]) missing.push_back(i);
    out->stall_report = "tfring stall inspector: some ranks are waiting for others: " + report.str() +
                        (reported > kListed ? "; and " + std::to_string(reported - kListed) + " more tensors" : "") +
                        WaitsOn(oldest, missing, now) +
                        ". (TFRING_STALL_CHECK_TIME_SECONDS=" + FormatNumber(stall_.warn_seconds) + ")";
  }
  for (const std::string& name : failed) {  // after the reports: they read what every rank waits on
    table_.erase(name);
    first_seen_.erase(name);
    last_warned_.erase(name);
  }
}

void Coordinator::Add(int rank, const RequestList& list) {
  if (list.shutdown && shutdown_rank_ < 0) shutdown_rank_ = rank;
  for (const Request& r : list.requests) {
    if (r.op == OpType::JOIN) {
      joined_[r.rank] = true;
      last_joined_ = r.rank;
      continue;
    }
    auto it = table_.find(r.name);
    if (it == table_.end()) {
      order_.push_back(r.name);
      if (stall_.clock) first_seen_[r.name] = stall_.clock();
      it = table_.emplace(r.name, std::vector<Request>()).first;
    }
    it->second.push_back(r);
    if (timeline_) timeline_->RankReady(r.name, rank);
  }
}

ResponseList Coordinator::Build() {
  ResponseList out;
  out.shutdown = shutdown_rank_ >= 0;
  out.shutdown_rank = shutdown_rank_;
  const int joined = static_cast<int>(std::count(joined_.begin(), joined_.end(), true));
  out.cacheable = joined == 0;
  std::vector<std::string> still_waiting;
  for (const std::string& name : order_) {
    auto& reqs = table_[name];
    std::vector<const Request*> by_rank(size_, nullptr);
    bool duplicate = false;
    for (const Request& r : reqs) {
      duplicate |= by_rank[r.rank] != nullptr;
      by_rank[r.rank] = &r;
    }
    int present = 0, joined_absent = 0;
    for (int i = 0; i < size_; ++i) {
      if (by_rank[i])
        ++present;
      else if (joined_[i])
        ++joined_absent;
    }
    if (present + joined_absent < size_ && !duplicate) {
      still_waiting.push_back(name);
      continue;
    }
    Response resp;
    if (duplicate) {  // built directly: BuildResponse expects every non-joined rank present
      resp.names = {name};
      resp.op = reqs[0].op;
      resp.kind = Response::ERROR;
      resp.error = "tfring: tensor '" + name + "' was submitted twice by one rank before completing" + set_.Where();
    } else {
      resp = BuildResponse(name, by_rank, joined_absent, set_);
    }
    out.responses.push_back(std::move(resp));
    table_.erase(name);
    first_seen_.erase(name);
    last_warned_.erase(name);
  }
  InspectStalls(still_waiting, &out);
  order_.clear();
  for (const std::string& name : still_waiting)
    if (table_.count(name)) order_.push_back(name);
  if (joined == size_) {
    Response j;
    j.op = OpType::JOIN;
    j.names = {"__tfring_join__"};
    j.last_joined_rank = last_joined_;
    j.joined = joined;
    out.responses.push_back(j);
    std::fill(joined_.begin(), joined_.end(), false);
  }
  shutdown_rank_ = -1;
  return out;
}

}  // namespace tfring
