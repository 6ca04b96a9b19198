#include "call.h"

#include "../common/names.h"

#include <utility>

namespace tfring {
namespace xla_ffi {
namespace {

bool FromXla(ffi::DataType t, DataType* out) {
  static const std::pair<ffi::DataType, DataType> kTypes[] = {
      {ffi::DataType::PRED, DataType::BOOL},     {ffi::DataType::U8, DataType::UINT8},
      {ffi::DataType::S8, DataType::INT8},       {ffi::DataType::U16, DataType::UINT16},
      {ffi::DataType::S16, DataType::INT16},     {ffi::DataType::S32, DataType::INT32},
      {ffi::DataType::S64, DataType::INT64},     {ffi::DataType::F16, DataType::FLOAT16},
      {ffi::DataType::BF16, DataType::BFLOAT16}, {ffi::DataType::F32, DataType::FLOAT32},
      {ffi::DataType::F64, DataType::FLOAT64}};
  for (const auto& kv : kTypes)
    if (kv.first == t) {
      *out = kv.second;
      return true;
    }
  return false;
}

Shape ShapeOf(ffi::Span<const int64_t> dims) { return Shape(dims.begin(), dims.end()); }

}  // namespace

ffi::ErrorCode ToXla(StatusCode code) {
  switch (code) {
    case StatusCode::INVALID_ARGUMENT:
      return ffi::ErrorCode::kInvalidArgument;
    case StatusCode::PRECONDITION_ERROR:
      return ffi::ErrorCode::kFailedPrecondition;
    case StatusCode::DEADLINE_EXCEEDED:
      return ffi::ErrorCode::kDeadlineExceeded;
    case StatusCode::WORKERS_FAILED:
      return ffi::ErrorCode::kAborted;
    default:
      return ffi::ErrorCode::kInternal;
  }
}

Status Call::AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) {
  const bool splits = index >= static_cast<int>(results.size());
  auto& t = splits ? extra[index - results.size()] : results[index];
  if (t->shape() == shape) {
    *out = t;
    return Status::OK();
  }
  Fail(Status::InvalidArgument("tfring: " + fn + ": this rank's result is " + ShapeString(shape) +
                               " but the compiled program allocated " + ShapeString(t->shape()) +
                               " (inside compiled code pass every rank's first dimension, e.g. sizes= for "
                               "allgather, or call it eagerly)"));
  void* data = Scratch(NumElements(shape) * DataTypeSize(t->dtype()));
  if (data == nullptr) return Status::Unknown("tfring: " + fn + ": no memory for a scratch result");
  *out = std::make_shared<XlaTensor>(data, t->dtype(), shape);
  return Status::OK();
}

void Call::Fail(const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (first_error_.ok()) first_error_ = s;
}

void Call::Done(const Status& s) {
  if (!s.ok()) Fail(s);
  if (remaining.fetch_sub(1) != 1) return;
  Status st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st = first_error_;
  }
  Complete(st);
}

std::string BuildEntries(const CallArgs& a, ffi::RemainingArgs args, ffi::RemainingRets rets,
                         const std::shared_ptr<Call>& call, std::vector<TensorEntry>* entries) {
  call->fn = a.fn;
  const size_t n = args.size();
  const bool alltoall = a.op == OpType::ALLTOALL;
  if (rets.size() != (alltoall ? 2 * n : n)) return "result count does not match the operands";
  entries->assign(n, TensorEntry());
  const auto names = TensorNames(std::string(a.name), static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    auto in = args.get<ffi::AnyBuffer>(i);
    auto out = rets.get<ffi::AnyBuffer>(i);
    if (in.has_error() || out.has_error()) return "bad operand or result " + std::to_string(i);
    TensorEntry& e = (*entries)[i];
    if (!FromXla(in->element_type(), &e.request.dtype))
      return "operand " + std::to_string(i) + " has a dtype tfring does not support";
    e.request.op = a.op;
    e.request.name = names[i];
    e.request.shape = ShapeOf(in->dimensions());
    e.request.reduce_op = static_cast<ReduceOp>(a.reduce_op);
    e.request.prescale = a.prescale;
    e.request.postscale = a.postscale;
    e.request.root_rank = static_cast<int32_t>(a.root);
    e.input = std::make_shared<XlaTensor>(in->untyped_data(), e.request.dtype, e.request.shape);
    call->results.push_back(
        std::make_shared<XlaTensor>((*out)->untyped_data(), e.request.dtype, ShapeOf((*out)->dimensions())));
    if (a.op == OpType::ALLREDUCE || a.op == OpType::BROADCAST) e.output = call->results.back();
    e.output_index = static_cast<int>(i);
    if (alltoall) {
      e.request.splits = a.splits;
      auto received = rets.get<ffi::AnyBuffer>(n + i);
      if (received.has_error() || (*received)->element_type() != ffi::DataType::S32)
        return "alltoall's received splits must be an int32 result";
      call->extra.push_back(std::make_shared<XlaTensor>((*received)->untyped_data(), DataType::INT32,
                                                        ShapeOf((*received)->dimensions())));
      e.extra_output_index = static_cast<int>(n + i);
    }
  }
  return "";
}

void EnqueueCall(const std::shared_ptr<Call>& call, std::vector<TensorEntry> entries, int64_t set) {
  call->remaining = static_cast<int>(entries.size());
  for (auto& e : entries) {
    e.context = call;
    e.callback = [call](const Status& s) { call->Done(s); };
  }
  Runtime::Get().Enqueue(std::move(entries), static_cast<int>(set));
}

}  // namespace xla_ffi
}  // namespace tfring
