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

#include "call.h"

namespace tfring {
namespace xla_ffi {
namespace {

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

// A call on host buffers: completes its promise; a wrongly-shaped result's scratch is host memory.
class HostCall : public Call {
 public:
  ffi::Promise promise;

 protected:
  void* Scratch(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    scratch_.emplace_back(bytes);
    return scratch_.back().data();
  }
  void Complete(const Status& s) override { Completer::Get().Push(promise, s); }

 private:
  std::deque<std::vector<char>> scratch_;
};

// Builds the entries, enqueues them all at once and returns the future.
ffi::Future Submit(const CallArgs& a, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t set) {
  auto call = std::make_shared<HostCall>();
  ffi::Future future(call->promise);
  std::vector<TensorEntry> entries;
  const std::string error = BuildEntries(a, args, rets, call, &entries);
  if (!error.empty())
    call->promise.SetError(ffi::Error(ffi::ErrorCode::kInvalidArgument, "tfring: " + std::string(a.fn) + ": " + error));
  else if (entries.empty())
    call->promise.SetAvailable();
  else
    EnqueueCall(call, std::move(entries), set);
  return future;
}

ffi::Future Allreduce(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view name, int64_t reduce_op,
                      double prescale, double postscale, int64_t set) {
  return Submit({"allreduce", OpType::ALLREDUCE, name, reduce_op, prescale, postscale}, args, rets, set);
}
ffi::Future Allgather(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view name, int64_t set) {
  return Submit({"allgather", OpType::ALLGATHER, name}, args, rets, set);
}
ffi::Future Broadcast(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view name, int64_t root,
                      int64_t set) {
  return Submit({"broadcast", OpType::BROADCAST, name, 1, 1.0, 1.0, root}, args, rets, set);
}
ffi::Future Alltoall(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view name,
                     ffi::Span<const int64_t> splits, int64_t set) {
  return Submit({"alltoall", OpType::ALLTOALL, name, 1, 1.0, 1.0, 0, {splits.begin(), splits.end()}}, args, rets, set);
}
ffi::Future Reducescatter(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view name, int64_t reduce_op,
                          double prescale, double postscale, int64_t set) {
  return Submit({"reducescatter", OpType::REDUCESCATTER, name, reduce_op, prescale, postscale}, args, rets, set);
}

// The handlers' operands and results, before their attributes.
auto Bind() { return ffi::Ffi::Bind().RemainingArgs().RemainingRets(); }

}  // namespace
}  // namespace xla_ffi
}  // namespace tfring

using namespace tfring::xla_ffi;  // NOLINT: the exported symbols below are C names

TFR_XLA_HANDLER_SYMBOLS(tfring_jax_);

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
