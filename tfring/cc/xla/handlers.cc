// tfring's XLA FFI handlers (CPU), shared by tfring.jax (registered through jax.ffi) and the TensorFlow ops'
// XLA lowering (tfring/cc/tensorflow/xla_ops.cc registers them with TensorFlow's XLA). Each collective is an
// asynchronous handler: it hands XLA's buffers to the core (zero copy: the core reads the operands and writes the
// results XLA allocated) and returns a future that completes when the core is done. Never blocking an XLA thread
// matters: XLA:CPU runs independent thunks concurrently on very few threads, in an order that can differ across ranks,
// so a handler waiting for its peers could hold the thread another rank's matching collective needs (measured: a
// deadlock at np=2 with 12 calls). Futures are completed on a thread of our own: XLA runs the next thunks inline on the
// completing thread, which must not be the core's background thread. join and barrier are plain blocking C functions
// (eager only).
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../common/runtime.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace tfring {
namespace jax_binding {
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

// A buffer XLA owns (and keeps alive until the handler's future completes).
class XlaTensor : public Tensor {
 public:
  XlaTensor(void* data, DataType dtype, Shape shape) : data_(data), dtype_(dtype), shape_(std::move(shape)) {}
  DataType dtype() const override { return dtype_; }
  Shape shape() const override { return shape_; }
  void* data() override { return data_; }
  int64_t size_bytes() const override { return NumElements(shape_) * DataTypeSize(dtype_); }

 private:
  void* data_;
  DataType dtype_;
  Shape shape_;
};

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

// Completes futures off the core's thread, in the order their collectives finished.
class Completer {
 public:
  static Completer& Get() {
    static Completer* c = new Completer();  // never destroyed: XLA may complete work during interpreter exit
    return *c;
  }
  void Push(ffi::Promise promise, Status status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.emplace_back(std::move(promise), std::move(status));
    }
    cv_.notify_one();
  }

 private:
  Completer() : thread_([this] { Run(); }) { thread_.detach(); }
  void Run() {
    while (true) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !queue_.empty(); });
      auto item = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      if (item.second.ok())
        item.first.SetAvailable();
      else
        item.first.SetError(ffi::Error(ToXla(item.second.code()), item.second.message()));
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<ffi::Promise, Status>> queue_;
  std::thread thread_;
};

// One handler call: its promise, the results XLA allocated, and how many entries are still running.
struct Call : public OpContext {
  ffi::Promise promise;
  std::vector<std::shared_ptr<XlaTensor>> results;  // output i of the call
  std::vector<std::shared_ptr<XlaTensor>> extra;    // alltoall: received splits (int32), one per entry
  std::atomic<int> remaining{0};
  std::mutex mu;
  Status first_error;
  std::string fn;
  std::deque<std::vector<char>> scratch;  // outputs of a rank whose compiled shapes were wrong (see below)

  // The core negotiated the output's shape; XLA fixed it when the program was compiled. When they differ this
  // rank still takes part in the transfer (into a scratch buffer of the negotiated size), so its peers, whose
  // shapes may be right, are not left waiting inside MPI; then this call fails with both shapes named.
  Status AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) override {
    const bool splits = index >= static_cast<int>(results.size());
    auto& t = splits ? extra[index - results.size()] : results[index];
    if (t->shape() == shape) {
      *out = t;
      return Status::OK();
    }
    Fail(Status::InvalidArgument("tfring: " + fn + ": this rank's result is " + ShapeString(shape) +
                                 " but the compiled program allocated " + ShapeString(t->shape()) +
                                 " (inside jax.jit pass every rank's first dimension, e.g. sizes= for "
                                 "allgather, or call it eagerly)"));
    std::lock_guard<std::mutex> lock(mu);
    scratch.emplace_back(NumElements(shape) * DataTypeSize(t->dtype()));
    *out = std::make_shared<XlaTensor>(scratch.back().data(), t->dtype(), shape);
    return Status::OK();
  }
  void Fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.ok()) first_error = s;
  }
  void Done(const Status& s) {
    if (!s.ok()) Fail(s);
    if (remaining.fetch_sub(1) == 1) {
      Status st;
      {
        std::lock_guard<std::mutex> lock(mu);
        st = first_error;
      }
      Completer::Get().Push(promise, st);
    }
  }
};

ffi::Error Refuse(const std::string& msg) { return ffi::Error(ffi::ErrorCode::kInvalidArgument, msg); }

// Builds one entry per operand (a grouped call names them "<name>_<i>of<n>", as Horovod's grouped ops), enqueues
// them all at once and returns the future. Results: the same count as operands (plus the splits outputs).
ffi::Future Submit(const char* fn, OpType op, ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view name,
                   int64_t reduce_op, double prescale, double postscale, int64_t root, int64_t set,
                   const std::vector<int64_t>& splits) {
  auto call = std::make_shared<Call>();
  call->fn = fn;
  ffi::Future future(call->promise);
  const size_t n = args.size();
  const bool alltoall = op == OpType::ALLTOALL;
  std::string error;
  if (rets.size() != (alltoall ? 2 * n : n)) error = "result count does not match the operands";
  std::vector<TensorEntry> entries(n);
  for (size_t i = 0; i < n && error.empty(); ++i) {
    auto in = args.get<ffi::AnyBuffer>(i);
    auto out = rets.get<ffi::AnyBuffer>(i);
    if (in.has_error() || out.has_error()) {
      error = "bad operand or result " + std::to_string(i);
      break;
    }
    TensorEntry& e = entries[i];
    if (!FromXla(in->element_type(), &e.request.dtype)) {
      error = "operand " + std::to_string(i) + " has a dtype tfring does not support";
      break;
    }
    e.request.op = op;
    e.request.name =
        n == 1 ? std::string(name) : std::string(name) + "_" + std::to_string(i + 1) + "of" + std::to_string(n);
    e.request.shape = ShapeOf(in->dimensions());
    e.request.reduce_op = static_cast<ReduceOp>(reduce_op);
    e.request.prescale = prescale;
    e.request.postscale = postscale;
    e.request.root_rank = static_cast<int32_t>(root);
    e.input = std::make_shared<XlaTensor>(in->untyped_data(), e.request.dtype, e.request.shape);
    call->results.push_back(
        std::make_shared<XlaTensor>((*out)->untyped_data(), e.request.dtype, ShapeOf((*out)->dimensions())));
    if (op == OpType::ALLREDUCE || op == OpType::BROADCAST) e.output = call->results.back();
    e.output_index = static_cast<int>(i);
    if (alltoall) {
      e.request.splits = splits;
      auto received = rets.get<ffi::AnyBuffer>(n + i);
      if (received.has_error() || (*received)->element_type() != ffi::DataType::S32) {
        error = "alltoall's received splits must be an int32 result";
        break;
      }
      call->extra.push_back(std::make_shared<XlaTensor>((*received)->untyped_data(), DataType::INT32,
                                                        ShapeOf((*received)->dimensions())));
      e.extra_output_index = static_cast<int>(n + i);
    }
  }
  if (!error.empty()) {
    call->promise.SetError(Refuse("tfring: " + std::string(fn) + ": " + error));
    return future;
  }
  if (n == 0) {
    call->promise.SetAvailable();
    return future;
  }
  call->remaining = static_cast<int>(n);
  for (auto& e : entries) {
    e.context = call;
    e.callback = [call](const Status& s) { call->Done(s); };
  }
  Runtime::Get().Enqueue(std::move(entries), static_cast<int>(set));
  return future;
}

ffi::Future Allreduce(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view name, int64_t reduce_op,
                      double prescale, double postscale, int64_t set) {
  return Submit("allreduce", OpType::ALLREDUCE, args, rets, name, reduce_op, prescale, postscale, 0, set, {});
}
ffi::Future Allgather(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view name, int64_t set) {
  return Submit("allgather", OpType::ALLGATHER, args, rets, name, 1, 1.0, 1.0, 0, set, {});
}
ffi::Future Broadcast(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view name, int64_t root,
                      int64_t set) {
  return Submit("broadcast", OpType::BROADCAST, args, rets, name, 1, 1.0, 1.0, root, set, {});
}
ffi::Future Alltoall(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view name,
                     ffi::Span<const int64_t> splits, int64_t set) {
  return Submit("alltoall", OpType::ALLTOALL, args, rets, name, 1, 1.0, 1.0, 0, set,
                std::vector<int64_t>(splits.begin(), splits.end()));
}
ffi::Future Reducescatter(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view name, int64_t reduce_op,
                          double prescale, double postscale, int64_t set) {
  return Submit("reducescatter", OpType::REDUCESCATTER, args, rets, name, reduce_op, prescale, postscale, 0, set, {});
}

}  // namespace
}  // namespace jax_binding
}  // namespace tfring

using namespace tfring::jax_binding;  // NOLINT: the exported symbols below are C names

XLA_FFI_DEFINE_HANDLER_SYMBOL(tfring_jax_allreduce, Allreduce,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("name")
                                  .Attr<int64_t>("reduce_op")
                                  .Attr<double>("prescale")
                                  .Attr<double>("postscale")
                                  .Attr<int64_t>("process_set"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    tfring_jax_allgather, Allgather,
    ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attr<std::string_view>("name").Attr<int64_t>("process_set"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(tfring_jax_broadcast, Broadcast,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("name")
                                  .Attr<int64_t>("root_rank")
                                  .Attr<int64_t>("process_set"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(tfring_jax_alltoall, Alltoall,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("name")
                                  .Attr<ffi::Span<const int64_t>>("splits")
                                  .Attr<int64_t>("process_set"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(tfring_jax_reducescatter, Reducescatter,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("name")
                                  .Attr<int64_t>("reduce_op")
                                  .Attr<double>("prescale")
                                  .Attr<double>("postscale")
                                  .Attr<int64_t>("process_set"));

// join (op 5) and barrier (op 6) of a process set, blocking (called through ctypes, which releases the GIL).
// Returns 0 and, for join, the last rank to join in *result; else an error code and the message in err.
extern "C" int tfring_jax_control(int op, int set, int* result, char* err, int err_len) {
  using namespace tfring;
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    int32_t joined = -1;
  };
  auto w = std::make_shared<Wait>();
  TensorEntry e;
  e.request.op = static_cast<OpType>(op);
  e.request.name = op == static_cast<int>(OpType::JOIN) ? "__tfring_join__" : "__tfring_barrier__";
  e.join_result = &w->joined;
  e.callback = [w](const Status& s) {
    std::lock_guard<std::mutex> lock(w->mu);
    w->status = s;
    w->done = true;
    w->cv.notify_all();
  };
  std::vector<TensorEntry> entries;
  entries.push_back(std::move(e));
  Runtime::Get().Enqueue(std::move(entries), set);
  std::unique_lock<std::mutex> lock(w->mu);
  w->cv.wait(lock, [&w] { return w->done; });  // the core's stall deadline bounds it
  if (!w->status.ok()) {
    std::snprintf(err, err_len, "%s", w->status.message().c_str());
    return static_cast<int>(w->status.code());
  }
  if (result) *result = w->joined;
  return 0;
}
