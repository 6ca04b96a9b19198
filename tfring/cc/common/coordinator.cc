#include "coordinator.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include "timeline.h"

namespace tfring {
namespace {

// "rank 0: float32; rank 1: int32" for the ranks grouped by the value that differs.
std::string DescribeByRank(const std::vector<const Request*>& reqs, const SetLabel& set,
                           const std::function<std::string(const Request&)>& value) {
  std::map<std::string, std::vector<int>> by_value;
  for (const Request* r : reqs)
    if (r) by_value[value(*r)].push_back(set.Global(r->rank));
  std::ostringstream os;
  bool first = true;
  for (const auto& kv : by_value) {
    os << (first ? "" : "; ") << (kv.second.size() > 1 ? "ranks " : "rank ");
    for (size_t i = 0; i < kv.second.size(); ++i) os << (i ? "," : "") << kv.second[i];
    os << ": " << kv.first;
    first = false;
  }
  return os.str();
}

bool AllEqual(const std::vector<const Request*>& reqs, const std::function<std::string(const Request&)>& value) {
  const Request* first = nullptr;
  for (const Request* r : reqs) {
    if (!r) continue;
    if (!first) first = r;
    else if (value(*r) != value(*first)) return false;
  }
  return true;
}

std::string Num(double d) {
  std::ostringstream os;
  os << d;
  return os.str();
}

// Empty splits mean an even split of the first dimension.
std::string CheckSplits(const Request& r, int size) {
  if (r.shape.empty()) return "passed a scalar; alltoall needs at least one dimension";
  const int64_t dim0 = r.shape[0];
  if (r.splits.empty()) {
    if (dim0 % size == 0) return "";
    return "passed no splits and its first dimension " + std::to_string(dim0) + " is not divisible by " +
           std::to_string(size) + " ranks";
  }
  if (static_cast<int>(r.splits.size()) != size)
    return "passed splits of length " + std::to_string(r.splits.size()) + ", expected one per rank (" +
           std::to_string(size) + ")";
  int64_t sum = 0;
  for (int64_t s : r.splits) {
    if (s < 0) return "passed a negative split " + std::to_string(s);
    sum += s;
  }
  if (sum != dim0)
    return "passed splits summing to " + std::to_string(sum) + " but its first dimension is " + std::to_string(dim0);
  return "";
}

}  // namespace

std::string RankListString(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  os << "]";
  return os.str();
}

std::string SetLabel::Where() const {
  if (id == 0) return "";
  return " in process set " + std::to_string(id) + " (ranks " + RankListString(global_ranks) + ")";
}

Response BuildResponse(const std::string& name, const std::vector<const Request*>& reqs, int joined,
                       const SetLabel& set) {
  Response resp;
  resp.names = {name};
  const Request* first = nullptr;
  for (const Request* r : reqs)
    if (r && !first) first = r;
  resp.op = first->op;
  resp.dtype = first->dtype;
  resp.reduce_op = first->reduce_op;
  resp.root_rank = first->root_rank;
  resp.prescale = first->prescale;
  resp.postscale = first->postscale;
  resp.joined = joined;
  const int size = static_cast<int>(reqs.size());

  auto fail = [&](const std::string& what, const std::function<std::string(const Request&)>& value) {
    resp.kind = Response::ERROR;
    resp.error = "tfring: ranks disagree on " + what + " for tensor '" + name + "'" + set.Where() + ": " +
                 DescribeByRank(reqs, set, value);
    return resp;
  };
  // An argument every rank passed alike but that cannot work (Horovod raises InvalidArgument for these).
  auto invalid = [&](const std::string& message) {
    resp.kind = Response::ERROR;
    resp.error = message + set.Where();
    resp.error_code = static_cast<uint8_t>(StatusCode::INVALID_ARGUMENT);
    return resp;
  };
  auto check = [&](const std::string& what, const std::function<std::string(const Request&)>& value) {
    return AllEqual(reqs, value) ? false : (fail(what, value), true);
  };
  auto shape_of = [](const Request& r) { return ShapeString(r.shape); };
  auto trailing = [](const Request& r) {
    Shape t(r.shape.size() > 1 ? r.shape.begin() + 1 : r.shape.end(), r.shape.end());
    return std::to_string(r.shape.size()) + "-d, trailing dims " + ShapeString(t);
  };

  if (check("the collective", [](const Request& r) { return std::string(OpTypeName(r.op)); })) return resp;
  if (check("dtype", [](const Request& r) { return std::string(DataTypeName(r.dtype)); })) return resp;
  if (check("device (host or GPU memory)",
            [](const Request& r) { return std::string(r.device < 0 ? "CPU" : "GPU"); }))
    return resp;
  if (first->device >= 0) {
    if (joined > 0) {
      resp.kind = Response::ERROR;
      resp.error = "tfring: GPU tensor '" + name + "' cannot be reduced while " + std::to_string(joined) +
                   " rank(s) have called join(); join() is supported for CPU tensors only";
      return resp;
    }
    for (const Request* r : reqs) resp.devices.push_back(r->device);
  }
  if (joined > 0 && resp.op != OpType::ALLREDUCE && resp.op != OpType::BARRIER) {
    resp.kind = Response::ERROR;
    resp.error = "tfring: " + std::string(OpTypeName(resp.op)) + " of tensor '" + name + "' cannot run while " +
                 std::to_string(joined) + " rank(s) have called join(); only allreduce supports joined ranks";
    return resp;
  }
  switch (resp.op) {
    case OpType::ALLREDUCE:
    case OpType::REDUCESCATTER:
      if (check("shape", shape_of)) return resp;
      if (resp.op == OpType::REDUCESCATTER && first->shape.empty())
        return invalid("tfring: reducescatter of tensor '" + name + "' needs at least one dimension, got a scalar");
      if (check("reduce op", [](const Request& r) { return std::string(ReduceOpName(r.reduce_op)); })) return resp;
      if (check("prescale_factor", [](const Request& r) { return Num(r.prescale); })) return resp;
      if (check("postscale_factor", [](const Request& r) { return Num(r.postscale); })) return resp;
      if (resp.reduce_op == ReduceOp::ADASUM) {
        if (resp.op != OpType::ALLREDUCE || !IsFloatingPoint(resp.dtype) || (size & (size - 1)) != 0 ||
            joined > 0 || first->device >= 0)
          return invalid("tfring: Adasum of tensor '" + name + "' needs an allreduce of a floating-point CPU tensor "
                         "over a power-of-two number of ranks with none joined; got " +
                         std::string(OpTypeName(resp.op)) + " of " + DataTypeName(resp.dtype) + " on " +
                         std::to_string(size) + " ranks" + (joined > 0 ? " (some joined)" : "") +
                         (first->device >= 0 ? " (GPU)" : ""));
      }
      resp.shape = first->shape;
      resp.sizes = {NumElements(first->shape)};
      break;
    case OpType::BROADCAST:
      if (check("root_rank (global rank)", [&set](const Request& r) {  // -1-root: a non-member (sets only)
            return std::to_string(r.root_rank >= 0 ? set.Global(r.root_rank)
                                                   : set.id != 0 ? -1 - r.root_rank : r.root_rank); }))
        return resp;
      // A root outside a process set arrives as -1 - its global rank (runtime.cc).
      if (first->root_rank < 0 && set.id != 0)
        return invalid("tfring: broadcast of tensor '" + name + "': root_rank=" +
                       std::to_string(-1 - first->root_rank) + " is not a member of the process set");
      if (first->root_rank < 0 || first->root_rank >= size)
        return invalid("tfring: broadcast of tensor '" + name + "': root_rank=" + std::to_string(first->root_rank) +
                       " is out of range for " + std::to_string(size) + " ranks");
      if (check("shape", shape_of)) return resp;
      resp.shape = first->shape;
      break;
    case OpType::ALLGATHER:
      if (check("rank and trailing dimensions", trailing)) return resp;
      resp.shape = first->shape;
      for (const Request* r : reqs) resp.sizes.push_back(r->shape.empty() ? 1 : r->shape[0]);
      break;
    case OpType::ALLTOALL:
      if (check("rank and trailing dimensions", trailing)) return resp;
      resp.shape = first->shape;
      for (const Request* r : reqs) {
        std::string err = CheckSplits(*r, size);
        if (!err.empty())
          return invalid("tfring: alltoall of tensor '" + name + "': rank " + std::to_string(set.Global(r->rank)) +
                         " " + err);
        if (r->splits.empty()) resp.sizes.insert(resp.sizes.end(), size, r->shape[0] / size);
        else resp.sizes.insert(resp.sizes.end(), r->splits.begin(), r->splits.end());
      }
      break;
    case OpType::PROCESS_SET:  // every rank must name the same change
      if (check("the process set change", [](const Request& r) {
            return std::to_string(r.root_rank) + " " + ShapeString(r.splits); }))
        return resp;
      resp.sizes = first->splits;
      break;
    case OpType::BARRIER:
    case OpType::JOIN:
      break;
  }
  return resp;
}

void Coordinator::InspectStalls(const std::vector<std::string>& waiting, ResponseList* out) {
  if (!stall_.clock || (stall_.warn_seconds <= 0 && stall_.shutdown_seconds <= 0)) return;
  const double now = stall_.clock();
  std::ostringstream report;
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
    for (int i = 0; i < size_; ++i) {
      std::ostringstream& os = present[i] || joined_[i] ? ready : missing;
      os << (os.tellp() > 0 ? "," : "") << set_.Global(i);
    }
    std::ostringstream line;
    line << "tensor '" << name << "' (" << OpTypeName(reqs[0].op) << ")" << set_.Where() << " waited "
         << static_cast<int>(age)
         << " s: submitted by ranks [" << ready.str() << "], missing ranks [" << missing.str() << "]";
    if (warn) {
      report << (report.tellp() > 0 ? "; " : "") << line.str();
      last_warned_[name] = now;
    }
    if (fail) {
      Response err = BuildResponse(name, {&reqs[0]}, 0, set_);
      err.kind = Response::ERROR;
      err.error_code = static_cast<uint8_t>(StatusCode::DEADLINE_EXCEEDED);
      err.error = "tfring: stalled collective: " + line.str() + "; failed after TFRING_STALL_SHUTDOWN_TIME_SECONDS=" +
                  Num(stall_.shutdown_seconds) + ". Ranks must submit the same collectives (check for "
                  "rank-dependent control flow, uneven data without join(), or a rank that died or hangs).";
      out->responses.push_back(err);
      table_.erase(name);
      first_seen_.erase(name);
      last_warned_.erase(name);
    }
  }
  if (report.tellp() > 0)
    out->stall_report = "tfring stall inspector: some ranks are waiting for others: " + report.str() +
                        ". (TFRING_STALL_CHECK_TIME_SECONDS=" + Num(stall_.warn_seconds) + ")";
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
      if (by_rank[i]) ++present;
      else if (joined_[i]) ++joined_absent;
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
