#include "data_watch.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <unistd.h>

#include "../../clock.h"
#include "../../logging.h"
#include "census.h"

namespace tfring {
namespace {

// The watch looks every 0.1 s (a census waits 1 s for answers), and not at all at transfers younger than that:
// almost every transfer ends within it, and then costs two mutex operations.
constexpr auto kTick = std::chrono::milliseconds(100);
constexpr double kQuietSeconds = 0.1;

// "the data transfer of allreduce 'grad_3' and 11 more": for the messages.
std::string Describe(const Response& r) {
  std::string s = std::string("the data transfer of ") + OpTypeName(r.op);
  if (!r.names.empty()) s += " '" + r.names[0] + "'";
  if (r.names.size() > 1) s += " and " + std::to_string(r.names.size() - 1) + " more";
  return s;
}

// (Tests) whether this rank's failed transfers hang on instead of returning, as an MPI call that neither a peer's
// death nor the revoke gives back would:
// TFRING_TEST_HOLD_FAILED_TRANSFER lists world ranks ("1" or "0,2").
bool HoldFailedTransfer() {
  const char* v = std::getenv("TFRING_TEST_HOLD_FAILED_TRANSFER");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (v == nullptr || rank == nullptr) return false;
  const std::string list = std::string(",") + v + ",";
  return list.find(std::string(",") + rank + ",") != std::string::npos;
}

}  // namespace

DataWatch::DataWatch(MpiContext& ctx) : ctx_(ctx), hold_failed_(HoldFailedTransfer()) {}

void DataWatch::Start() {
  if (ctx_.stall_warn_seconds <= 0 && ctx_.stall_shutdown_seconds <= 0) return;
  if (ctx_.thread_level != MPI_THREAD_MULTIPLE) return;  // the watch calls MPI while the transfer blocks in it
  std::lock_guard<std::mutex> lock(mu_);
  if (running_) return;
  running_ = true;
  stop_ = false;
  thread_ = std::thread(&DataWatch::Loop, this);
}

void DataWatch::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_) return;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  running_ = false;
}

void DataWatch::Begin(const Response& r) {
  std::lock_guard<std::mutex> lock(mu_);
  active_ = true;
  ++seq_;
  start_ = SteadySeconds();
  response_ = &r;
}

Status DataWatch::End(Status s) {
  std::unique_lock<std::mutex> lock(mu_);
  if (hold_failed_ && (gave_up_ || !s.ok())) {  // (tests) the call never comes back: the backstop ends this process
    lock.unlock();
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  active_ = false;
  if (!gave_up_) return s;
  gave_up_ = false;
  ctx_.abandoned = true;  // the silent ranks never finished this transfer: finalizing ends the job
  return failure_;
}

void DataWatch::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t checking = 0;
  std::unique_ptr<SilenceCheck> check;
  while (!stop_) {
    cv_.wait_for(lock, kTick);
    const double backstop = std::max(5.0, ctx_.stall_shutdown_seconds);
    if (!stop_ && active_ && gave_up_ && seq_ == checking && SteadySeconds() - gave_up_at_ >= backstop) {
      TFR_LOG(TFR_ERROR, Describe(*response_)
                             << " has not returned " << backstop
                             << " s after this rank abandoned it (the communicators revoked): MPI does not give the "
                                "call back, so this process ends itself (SIGKILL, as a failed worker) and the job "
                                "goes on without it");
      std::fflush(stderr);
      kill(getpid(), SIGKILL);
    }
    if (stop_ || !active_ || gave_up_ || SteadySeconds() - start_ < kQuietSeconds) continue;
    if (checking != seq_) {
      check.reset(new SilenceCheck(ctx_, Describe(*response_), start_));
      checking = seq_;
    }
    lock.unlock();
    AnswerPings();  // this rank is alive while its transfer waits for others
    Status failure;
    const bool give_up = check->Poll(&failure, [this, checking] {
      std::lock_guard<std::mutex> relock(mu_);
      return active_ && seq_ == checking;
    });
    lock.lock();
    if (!give_up || !active_ || seq_ != checking) continue;
    if (!ctx_.fault_tolerant) {
      // Without ULFM nothing returns the blocked call: say why on every live rank, then end the job.
      TFR_LOG(TFR_ERROR, failure.message() << "; every live rank ends the job now (MPI_Abort): a transfer blocked in "
                                              "MPI cannot be abandoned");
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::seconds(2));  // the other live ranks report it too
      MPI_Abort(MPI_COMM_WORLD, 1);
      return;
    }
    gave_up_ = true;
    gave_up_at_ = SteadySeconds();
    failure_ = Status::DeadlineExceeded(failure.message() + "; the transfer is abandoned on every live rank");
    ctx_.Revoke();  // the blocked call returns MPI_ERR_REVOKED; End() reports the deadline instead
  }
}

}  // namespace tfring
