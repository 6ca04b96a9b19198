#include "census.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <sstream>
#include <thread>

#include "../../clock.h"
#include "../../logging.h"
#include "declare_failed.h"

namespace tfring {
namespace {

constexpr int kPing = 7101, kPong = 7102;
constexpr double kCensusSeconds = 1.0;       // how long a census waits for the answers (live ranks: ms)
constexpr double kFailureGraceSeconds = 10;  // elastic: for MPI to report a silent rank ended by a peer
constexpr double kNever = 1e300;

std::mutex g_comms_mu;
std::vector<MPI_Comm> g_census_comms;
// Held for a whole census or a round of answers: two threads probing the same communicator could both see one
// ping, and the second receive would then wait forever.
std::mutex g_io_mu;
std::atomic<int> g_census_seq{0};  // a late answer to an earlier census does not count for a later one
std::atomic<SilentHook> g_silent_hook{nullptr};

void AnswerPingsLocked() {
  std::vector<MPI_Comm> comms;
  {
    std::lock_guard<std::mutex> lock(g_comms_mu);
    comms = g_census_comms;
  }
  for (MPI_Comm c : comms)
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kPing, c, &flag, &st) != MPI_SUCCESS || !flag) break;
      int seq = 0;
      if (MPI_Recv(&seq, 1, MPI_INT, st.MPI_SOURCE, kPing, c, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
      MPI_Send(&seq, 1, MPI_INT, st.MPI_SOURCE, kPong, c);  // 4 bytes: sent eagerly, never blocks
    }
}

std::string Seconds(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

}  // namespace

void RegisterCensusComm(MPI_Comm comm) {
  std::lock_guard<std::mutex> lock(g_comms_mu);
  g_census_comms.push_back(comm);
}

void UnregisterCensusComm(MPI_Comm comm) {
  std::lock_guard<std::mutex> io(g_io_mu);  // no other thread is probing it while it goes
  std::lock_guard<std::mutex> lock(g_comms_mu);
  g_census_comms.erase(std::remove(g_census_comms.begin(), g_census_comms.end(), comm), g_census_comms.end());
}

void AnswerPings() {
  std::unique_lock<std::mutex> io(g_io_mu, std::try_to_lock);
  if (io.owns_lock()) AnswerPingsLocked();
}

std::vector<int> Census(const MpiContext& ctx) {
  std::vector<int> silent;
  if (ctx.census_comm == MPI_COMM_NULL) return silent;
  std::lock_guard<std::mutex> io(g_io_mu);
  const int seq = ++g_census_seq;
  std::vector<bool> answered(ctx.size, false);
  answered[ctx.rank] = true;
  for (int r = 0; r < ctx.size; ++r)
    if (r != ctx.rank) MPI_Send(&seq, 1, MPI_INT, r, kPing, ctx.census_comm);
  int missing = ctx.size - 1;
  const double until = SteadySeconds() + kCensusSeconds;
  while (missing > 0 && SteadySeconds() < until) {
    AnswerPingsLocked();  // the others take their census at about the same time
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kPong, ctx.census_comm, &flag, &st) == MPI_SUCCESS && flag) {
      int got = 0;
      MPI_Recv(&got, 1, MPI_INT, st.MPI_SOURCE, kPong, ctx.census_comm, MPI_STATUS_IGNORE);
      if (got == seq && !answered[st.MPI_SOURCE]) {
        answered[st.MPI_SOURCE] = true;
        --missing;
      }
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int r = 0; r < ctx.size; ++r)
    if (!answered[r]) silent.push_back(r);
  return silent;
}

std::string Describe(const MpiContext& ctx, const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    out << (i ? ", " : "") << (r < static_cast<int>(ctx.world_rank.size()) ? ctx.world_rank[r] : r);
    if (r < static_cast<int>(ctx.host_name.size())) out << " (host " << ctx.host_name[r] << ")";
  }
  return out.str();
}

void SetSilentHook(SilentHook hook) { g_silent_hook = hook; }

void EndSilent(const MpiContext& ctx, const std::vector<int>& silent) {
  auto answering = [&](int r) { return std::find(silent.begin(), silent.end(), r) == silent.end(); };
  int lowest = -1;  // the lowest answering rank: it asks the launcher where no rank on the host can act
  for (int r = 0; r < ctx.size && lowest < 0; ++r)
    if (answering(r)) lowest = r;
  auto world = [&](int r) { return r < static_cast<int>(ctx.world_rank.size()) ? ctx.world_rank[r] : r; };
  // Everything the deciding thread needs is copied: the runtime (ctx) may be rebuilt before it ends.
  std::vector<int> ranks, pids, alone, mine;  // mine: which of them this rank SIGKILLs
  std::vector<std::string> hosts;
  std::vector<int> known;
  for (int s : silent) {
    if (s >= static_cast<int>(ctx.pid.size()) || s >= static_cast<int>(ctx.host_of.size())) continue;
    int ender = -1;  // the lowest answering rank on the silent rank's host
    for (int r = 0; r < ctx.size && ender < 0; ++r)
      if (ctx.host_of[r] == ctx.host_of[s] && answering(r)) ender = r;
    known.push_back(s);
    ranks.push_back(world(s));
    hosts.push_back(ctx.host_name[s]);
    pids.push_back(ctx.pid[s]);
    alone.push_back(ender < 0);
    if (ender == ctx.rank) mine.push_back(static_cast<int>(ranks.size()) - 1);
  }
  const std::string said = Describe(ctx, known);
  const SilentHook hook = g_silent_hook;
  const int me = world(ctx.rank), my_pid = getpid();
  const std::string my_host = ctx.rank < static_cast<int>(ctx.host_name.size()) ? ctx.host_name[ctx.rank] : "";
  const bool ask = lowest == ctx.rank;
  // Declaring runs beside the thread blocked in MPI: only where MPI allows calls from several threads at once.
  const bool can_declare = hook && ctx.thread_level == MPI_THREAD_MULTIPLE;
  std::vector<MpiProcessName> names = can_declare ? ProcessNames(ctx.comm, known) : std::vector<MpiProcessName>();
  auto decide = [=] {
    for (int i : mine) {
      TFR_LOG(TFR_WARNING, "ending rank " << ranks[i] << " (host " << hosts[i] << "), pid " << pids[i]
                                          << ": it stopped responding; the elastic job goes on without it");
      kill(pids[i], SIGKILL);
    }
    int verdict = -1;
    if (hook) {
      std::vector<const char*> host_ptrs;
      for (const auto& h : hosts) host_ptrs.push_back(h.c_str());
      verdict = hook(me, my_host.c_str(), my_pid, static_cast<int>(ranks.size()), ranks.data(), host_ptrs.data(),
                     pids.data(), alone.data(), ask);
    }
    if (verdict == 0) {  // this rank is the one cut off (or was declared silent first): it must not go on alone
      TFR_LOG(TFR_ERROR, "this rank cannot go on with the others (" << said << " stopped responding to it and the "
                                                                    << "launcher did not confirm): ending itself");
      kill(getpid(), SIGKILL);
    }
    if (verdict == 1) {
      const bool declared = !names.empty() && DeclareFailed(names);
      TFR_LOG(TFR_WARNING, (declared ? "declared " : "could not declare ") << said << " failed to MPI");
    }
    if (ask)
      for (size_t i = 0; i < alone.size(); ++i)
        if (alone[i])
          TFR_LOG(TFR_WARNING, "rank " << ranks[i] << " (host " << hosts[i] << "), pid " << pids[i]
                                       << " stopped responding and no live rank shares its host: "
                                       << (verdict == 1 ? "asking the launcher to end it"
                                                        : "nothing here can end it (no launcher decided)"));
  };
  // On a thread of its own: a Python hook needs the GIL, which this waiting thread must never wait for.
  if (hook)
    std::thread(decide).detach();
  else
    decide();
}

SilenceCheck::SilenceCheck(const MpiContext& ctx, std::string what, double start)
    : ctx_(ctx), what_(std::move(what)), start_(start) {
  warn_at_ = ctx.stall_warn_seconds > 0 ? start + ctx.stall_warn_seconds : kNever;
  give_up_at_ = ctx.stall_shutdown_seconds > 0 ? start + ctx.stall_shutdown_seconds : kNever;
}

bool SilenceCheck::Poll(Status* failure, const std::function<bool()>& still_waiting) {
  const double now = SteadySeconds();
  const bool final = now + kCensusSeconds >= give_up_at_;  // the census ends at the deadline: the last one decides
  if (now < warn_at_ && !final) return false;
  if (ended_silent_ && !final) return false;  // decided: the grace is for MPI to report them, no more warnings
  const std::vector<int> silent = Census(ctx_);
  const int waited = static_cast<int>(SteadySeconds() - start_);
  // A transfer that failed with a peer's death during the census: its survivors (busy resetting) were named too.
  if (still_waiting && !still_waiting()) return false;
  if (silent.empty()) {  // every rank is alive and waiting too: the wait is legitimate
    warn_at_ = warn_at_ == kNever ? kNever : SteadySeconds() + ctx_.stall_warn_seconds;
    // The next deciding census a second from now, not at once: no ping storm while the wait goes on.
    if (give_up_at_ != kNever) give_up_at_ = std::max(give_up_at_, SteadySeconds() + 2 * kCensusSeconds);
    return false;
  }
  if (final && ctx_.fault_tolerant && !ended_silent_) {
    // An elastic job (ULFM) goes on without them: a peer on each silent rank's host ends its process, MPI then
    // reports the failure to every survivor, and they recover as after a kill.
    EndSilent(ctx_, silent);
    ended_silent_ = true;
    give_up_at_ = SteadySeconds() + kFailureGraceSeconds;
    return false;
  }
  if (final) {
    *failure = Status::DeadlineExceeded(
        "tfring: " + Describe(ctx_, silent) + " stopped responding: " + what_ + " waited " + std::to_string(waited) +
        " s for them (TFRING_STALL_SHUTDOWN_TIME_SECONDS=" + Seconds(ctx_.stall_shutdown_seconds) + ")");
    return true;
  }
  TFR_LOG(TFR_WARNING, Describe(ctx_, silent)
                           << " stopped responding: " << what_ << " has waited " << waited
                           << " s for them; the job fails at " << static_cast<int>(ctx_.stall_shutdown_seconds)
                           << " s (TFRING_STALL_SHUTDOWN_TIME_SECONDS) unless they answer");
  warn_at_ = SteadySeconds() + ctx_.stall_warn_seconds;
  return false;
}

}  // namespace tfring
