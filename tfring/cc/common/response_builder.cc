#include "response_builder.h"

#include <map>
#include <sstream>

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
    if (!first)
      first = r;
    else if (value(*r) != value(*first))
      return false;
  }
  return true;
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

std::string FormatNumber(double d) {
  std::ostringstream os;
  os << d;
  return os.str();
}

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
  return ResponseBuilder(name, reqs, joined, set).Build();
}

ResponseBuilder::ResponseBuilder(const std::string& name, const std::vector<const Request*>& reqs, int joined,
                                 const SetLabel& set)
    : name_(name), reqs_(reqs), joined_(joined), set_(set), size_(static_cast<int>(reqs.size())) {
  for (const Request* r : reqs)
    if (r && !first_) first_ = r;
}

Response ResponseBuilder::Build() {
  resp_.names = {name_};
  resp_.op = first_->op;
  resp_.dtype = first_->dtype;
  resp_.reduce_op = first_->reduce_op;
  resp_.root_rank = first_->root_rank;
  resp_.prescale = first_->prescale;
  resp_.postscale = first_->postscale;
  resp_.joined = joined_;
  if (CheckCommon()) return resp_;
  using B = ResponseBuilder;
  static bool (B::* const kChecks[])() = {
      &B::CheckReduction,  // the op's own checks, in OpType's order: allreduce
      &B::CheckAllgather,  // allgather
      &B::CheckBroadcast,  // broadcast
      &B::CheckAlltoall,   // alltoall
      &B::CheckReduction,  // reducescatter
      nullptr,             // join
      nullptr,             // barrier
      &B::CheckSetChange,  // process set change
  };
  if (const auto check = ByEnum(kChecks, resp_.op, nullptr)) (this->*check)();
  return resp_;
}

bool ResponseBuilder::Disagree(const std::string& what, const Field& value) {
  if (AllEqual(reqs_, value)) return false;
  return Fail("tfring: ranks disagree on " + what + " for tensor '" + name_ + "'" + set_.Where() + ": " +
              DescribeByRank(reqs_, set_, value));
}

bool ResponseBuilder::Invalid(const std::string& message) {  // Horovod raises InvalidArgument for these
  Fail(message + set_.Where());
  resp_.error_code = static_cast<uint8_t>(StatusCode::INVALID_ARGUMENT);
  return true;
}

bool ResponseBuilder::Fail(const std::string& message) {
  resp_.kind = Response::ERROR;
  resp_.error = message;
  return true;
}

bool ResponseBuilder::CheckCommon() {
  if (Disagree("the collective", [](const Request& r) { return std::string(OpTypeName(r.op)); })) return true;
  if (Disagree("dtype", [](const Request& r) { return std::string(DataTypeName(r.dtype)); })) return true;
  if (Disagree("device (host or GPU memory)",
               [](const Request& r) { return std::string(r.device < 0 ? "CPU" : "GPU"); }))
    return true;
  if (first_->device >= 0) {
    if (joined_ > 0)
      return Fail("tfring: GPU tensor '" + name_ + "' cannot be reduced while " + std::to_string(joined_) +
                  " rank(s) have called join(); join() is supported for CPU tensors only");
    for (const Request* r : reqs_) resp_.devices.push_back(r->device);
  }
  if (joined_ > 0 && resp_.op != OpType::ALLREDUCE && resp_.op != OpType::BARRIER)
    return Fail("tfring: " + std::string(OpTypeName(resp_.op)) + " of tensor '" + name_ + "' cannot run while " +
                std::to_string(joined_) + " rank(s) have called join(); only allreduce supports joined ranks");
  return false;
}

bool ResponseBuilder::CheckReduction() {
  if (Disagree("shape", [](const Request& r) { return ShapeString(r.shape); })) return true;
  if (resp_.op == OpType::REDUCESCATTER && first_->shape.empty())
    return Invalid("tfring: reducescatter of tensor '" + name_ + "' needs at least one dimension, got a scalar");
  if (Disagree("reduce op", [](const Request& r) { return std::string(ReduceOpName(r.reduce_op)); })) return true;
  if (Disagree("prescale_factor", [](const Request& r) { return FormatNumber(r.prescale); })) return true;
  if (Disagree("postscale_factor", [](const Request& r) { return FormatNumber(r.postscale); })) return true;
  if (resp_.reduce_op == ReduceOp::ADASUM && (resp_.op != OpType::ALLREDUCE || !IsFloatingPoint(resp_.dtype) ||
                                              (size_ & (size_ - 1)) != 0 || joined_ > 0 || first_->device >= 0))
    return Invalid("tfring: Adasum of tensor '" + name_ +
                   "' needs an allreduce of a floating-point CPU tensor "
                   "over a power-of-two number of ranks with none joined; got " +
                   std::string(OpTypeName(resp_.op)) + " of " + DataTypeName(resp_.dtype) + " on " +
                   std::to_string(size_) + " ranks" + (joined_ > 0 ? " (some joined)" : "") +
                   (first_->device >= 0 ? " (GPU)" : ""));
  resp_.shape = first_->shape;
  resp_.sizes = {NumElements(first_->shape)};
  return false;
}

bool ResponseBuilder::CheckBroadcast() {
  const SetLabel& set = set_;
  // A root outside a process set arrives as -1 - its global rank (runtime.cc).
  if (Disagree("root_rank (global rank)", [&set](const Request& r) {
        return std::to_string(r.root_rank >= 0 ? set.Global(r.root_rank)
                              : set.id != 0    ? -1 - r.root_rank
                                               : r.root_rank);
      }))
    return true;
  const int root = first_->root_rank;
  if (root < 0 && set_.id != 0)
    return Invalid("tfring: broadcast of tensor '" + name_ + "': root_rank=" + std::to_string(-1 - root) +
                   " is not a member of the process set");
  if (root < 0 || root >= size_)
    return Invalid("tfring: broadcast of tensor '" + name_ + "': root_rank=" + std::to_string(root) +
                   " is out of range for " + std::to_string(size_) + " ranks");
  if (Disagree("shape", [](const Request& r) { return ShapeString(r.shape); })) return true;
  resp_.shape = first_->shape;
  return false;
}

static std::string Trailing(const Request& r) {
  Shape t(r.shape.size() > 1 ? r.shape.begin() + 1 : r.shape.end(), r.shape.end());
  return std::to_string(r.shape.size()) + "-d, trailing dims " + ShapeString(t);
}

bool ResponseBuilder::CheckAllgather() {
  if (Disagree("rank and trailing dimensions", Trailing)) return true;
  resp_.shape = first_->shape;
  for (const Request* r : reqs_) resp_.sizes.push_back(r->shape.empty() ? 1 : r->shape[0]);
  return false;
}

bool ResponseBuilder::CheckAlltoall() {
  if (Disagree("rank and trailing dimensions", Trailing)) return true;
  resp_.shape = first_->shape;
  for (const Request* r : reqs_) {
    std::string err = CheckSplits(*r, size_);
    if (!err.empty())
      return Invalid("tfring: alltoall of tensor '" + name_ + "': rank " + std::to_string(set_.Global(r->rank)) + " " +
                     err);
    if (r->splits.empty())
      resp_.sizes.insert(resp_.sizes.end(), size_, r->shape[0] / size_);
    else
      resp_.sizes.insert(resp_.sizes.end(), r->splits.begin(), r->splits.end());
  }
  return false;
}

bool ResponseBuilder::CheckSetChange() {
  if (Disagree("the process set change",
               [](const Request& r) { return std::to_string(r.root_rank) + " " + ShapeString(r.splits); }))
    return true;
  resp_.sizes = first_->splits;
  return false;
}

}  // namespace tfring
