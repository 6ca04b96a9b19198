#include "transport.h"
#include "../../clock.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <sstream>
#include <thread>

#include "../../logging.h"

namespace tfring {
namespace {

constexpr int kPing = 7101, kPong = 7102;
constexpr double kSpinSeconds = 0.002;       // pure polling first: most waits end within microseconds
constexpr double kShortSpinSeconds = 1e-4;   // the same with under 2 cores per rank (see Wait)
constexpr double kCensusSeconds = 1.0;       // how long a census waits for the answers (live ranks: ms)
constexpr double kFailureGraceSeconds = 10;  // elastic: for MPI to report a silent rank ended by a peer
constexpr double kNever = 1e300;

double Now() { return SteadySeconds(); }

std::string Seconds(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

std::mutex g_census_mu;
std::vector<MPI_Comm> g_census_comms;

}  // namespace

void RegisterCensusComm(MPI_Comm comm) {
  std::lock_guard<std::mutex> lock(g_census_mu);
  g_census_comms.push_back(comm);
}

void UnregisterCensusComm(MPI_Comm comm) {
  std::lock_guard<std::mutex> lock(g_census_mu);
  g_census_comms.erase(std::remove(g_census_comms.begin(), g_census_comms.end(), comm), g_census_comms.end());
}

Status MpiTransport::AllreduceBitAnd(std::vector<uint64_t>* bits) {
  MPI_Request r;
  TFR_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, bits->data(), static_cast<int>(bits->size()), MPI_UINT64_T, MPI_BAND,
                               ctx_.comm, &r));
  return Wait(&r, "the negotiation's cache round");
}

Status MpiTransport::GatherToRoot(const std::string& mine, std::vector<std::string>* all) {
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(ctx_.size), displs(ctx_.size);
  MPI_Request r;
  TFR_CHECK_MPI(MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, ctx_.comm, &r));
  TFR_RETURN_IF_ERROR(Wait(&r, "the negotiation (requests to rank 0)"));
  std::string joined;
  if (ctx_.rank == 0) {
    int total = 0;
    for (int i = 0; i < ctx_.size; ++i) displs[i] = total, total += lens[i];
    joined.resize(total);
  }
  TFR_CHECK_MPI(
      MPI_Igatherv(mine.data(), len, MPI_BYTE, &joined[0], lens.data(), displs.data(), MPI_BYTE, 0, ctx_.comm, &r));
  TFR_RETURN_IF_ERROR(Wait(&r, "the negotiation (requests to rank 0)"));
  all->clear();
  if (ctx_.rank == 0)
    for (int i = 0; i < ctx_.size; ++i) all->push_back(joined.substr(displs[i], lens[i]));
  return Status::OK();
}

Status MpiTransport::BroadcastFromRoot(std::string* bytes) {
  int len = static_cast<int>(bytes->size());
  MPI_Request r;
  TFR_CHECK_MPI(MPI_Ibcast(&len, 1, MPI_INT, 0, ctx_.comm, &r));
  TFR_RETURN_IF_ERROR(Wait(&r, "the negotiation (rank 0's responses)"));
  bytes->resize(len);
  TFR_CHECK_MPI(MPI_Ibcast(&(*bytes)[0], len, MPI_BYTE, 0, ctx_.comm, &r));
  return Wait(&r, "the negotiation (rank 0's responses)");
}

Status MpiTransport::Wait(MPI_Request* request, const char* what) {
  const double start = Now();
  const double warn_every = ctx_.stall_warn_seconds;
  double warn_at = warn_every > 0 ? start + warn_every : kNever;
  double give_up_at = ctx_.stall_shutdown_seconds > 0 ? start + ctx_.stall_shutdown_seconds : kNever;
  bool ended_silent = false;
  // A rank has two busy threads (the framework's and this one): with fewer than 2 cores per rank, this thread's
  // polling takes the core that the rank it waits for needs next, and a 2 ms spin turns a 0.6 ms eager
  // collective into 5 (3 ranks on 2 cores, measured). There, poll 0.1 ms, then sleep as below.
  const double spin = ctx_.min_cpu_milli_per_rank >= 2000 ? kSpinSeconds : kShortSpinSeconds;
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiError(what, rc);
    if (done) return Status::OK();
    const double now = Now();
    if (now - start < spin) continue;
    AnswerPings();
    // The census ends at the deadline: the last one before it decides.
    const bool final = now + kCensusSeconds >= give_up_at;
    if (now >= warn_at || final) {
      const std::vector<int> silent = Census();
      const int waited = static_cast<int>(Now() - start);
      if (silent.empty()) {  // every rank is alive and waiting here too: the wait is legitimate
        warn_at = warn_at == kNever ? kNever : Now() + warn_every;
        // The next deciding census a second from now, not at once: no ping storm while the wait goes on.
        if (give_up_at != kNever) give_up_at = std::max(give_up_at, Now() + 2 * kCensusSeconds);
        continue;
      }
      if (final && ctx_.fault_tolerant && !ended_silent) {
        // An elastic job (ULFM) goes on without them: a peer on each silent rank's host ends its process, MPI then
        // reports the failure to every survivor, and they recover as after a kill.
        EndSilent(silent);
        ended_silent = true;
        give_up_at = Now() + kFailureGraceSeconds;
        continue;
      }
      if (final) {
        ctx_.abandoned = true;
        return Status::DeadlineExceeded(
            "tfring: " + Describe(silent) + " stopped responding: " + what + " waited " + std::to_string(waited) +
            " s for them (TFRING_STALL_SHUTDOWN_TIME_SECONDS=" + Seconds(ctx_.stall_shutdown_seconds) +
            "); every other rank fails now, and the job ends when the ranks finalize");
      }
      TFR_LOG(TFR_WARNING, Describe(silent)
                               << " stopped responding: " << what << " has waited " << waited
                               << " s for them; the job fails at " << static_cast<int>(ctx_.stall_shutdown_seconds)
                               << " s (TFRING_STALL_SHUTDOWN_TIME_SECONDS) unless they answer");
      warn_at = Now() + warn_every;
    }
    // A longer wait (a straggler, a stall) polls less often: a waiting rank that spins takes the cores that the
    // ranks it waits for need (2 cores, 3 ranks here). At most 1/20 of the time already waited is added.
    std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp((now - start) / 20, 50e-6, 1e-3)));
  }
}

void MpiTransport::EndSilent(const std::vector<int>& silent) {
  for (int s : silent) {
    if (s >= static_cast<int>(ctx_.pid.size()) || s >= static_cast<int>(ctx_.host_of.size())) continue;
    int ender = -1;  // the lowest answering rank on the silent rank's host
    for (int r = 0; r < ctx_.size && ender < 0; ++r)
      if (ctx_.host_of[r] == ctx_.host_of[s] && std::find(silent.begin(), silent.end(), r) == silent.end()) ender = r;
    if (ender != ctx_.rank) continue;
    TFR_LOG(TFR_WARNING, "ending " << Describe({s}) << ", pid " << ctx_.pid[s]
                                   << ": it stopped responding; the elastic job goes on without it");
    kill(ctx_.pid[s], SIGKILL);
  }
}

void MpiTransport::AnswerPings() {
  std::vector<MPI_Comm> comms;
  {
    std::lock_guard<std::mutex> lock(g_census_mu);
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

std::vector<int> MpiTransport::Census() {
  std::vector<int> silent;
  if (ctx_.census_comm == MPI_COMM_NULL) return silent;
  const int seq = ++census_seq_;
  std::vector<bool> answered(ctx_.size, false);
  answered[ctx_.rank] = true;
  for (int r = 0; r < ctx_.size; ++r)
    if (r != ctx_.rank) MPI_Send(&seq, 1, MPI_INT, r, kPing, ctx_.census_comm);
  int missing = ctx_.size - 1;
  const double until = Now() + kCensusSeconds;
  while (missing > 0 && Now() < until) {
    AnswerPings();  // the others take their census at about the same time
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kPong, ctx_.census_comm, &flag, &st) == MPI_SUCCESS && flag) {
      int got = 0;
      MPI_Recv(&got, 1, MPI_INT, st.MPI_SOURCE, kPong, ctx_.census_comm, MPI_STATUS_IGNORE);
      if (got == seq && !answered[st.MPI_SOURCE]) {  // an older census' late answer does not count
        answered[st.MPI_SOURCE] = true;
        --missing;
      }
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int r = 0; r < ctx_.size; ++r)
    if (!answered[r]) silent.push_back(r);
  return silent;
}

std::string MpiTransport::Describe(const std::vector<int>& ranks) const {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    out << (i ? ", " : "") << (r < static_cast<int>(ctx_.world_rank.size()) ? ctx_.world_rank[r] : r);
    if (r < static_cast<int>(ctx_.host_name.size())) out << " (host " << ctx_.host_name[r] << ")";
  }
  return out.str();
}

}  // namespace tfring
