#include "transport.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "../../clock.h"
#include "census.h"

namespace tfring {
namespace {

constexpr double kSpinSeconds = 0.002;      // pure polling first: most waits end within microseconds
constexpr double kShortSpinSeconds = 1e-4;  // the same with under 2 cores per rank (see Wait)

}  // namespace

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
  const double start = SteadySeconds();
  SilenceCheck check(ctx_, what, start);
  // A rank has two busy threads (the framework's and this one): with fewer than 2 cores per rank, this thread's
  // polling takes the core that the rank it waits for needs next, and a 2 ms spin turns a 0.6 ms eager
  // collective into 5 (3 ranks on 2 cores, measured). There, poll 0.1 ms, then sleep as below.
  const double spin = ctx_.min_cpu_milli_per_rank >= 2000 ? kSpinSeconds : kShortSpinSeconds;
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiError(what, rc);
    if (done) return Status::OK();
    const double now = SteadySeconds();
    if (now - start < spin) continue;
    AnswerPings();
    Status failure;
    if (check.Poll(&failure)) {
      ctx_.abandoned = true;  // the silent ranks never joined this collective: finalizing ends the job
      return Status::DeadlineExceeded(failure.message() +
                                      "; every other rank fails now, and the job ends when the ranks finalize");
    }
    // A longer wait (a straggler, a stall) polls less often: a waiting rank that spins takes the cores that the
    // ranks it waits for need (2 cores, 3 ranks here). At most 1/20 of the time already waited is added.
    std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp((now - start) / 20, 50e-6, 1e-3)));
  }
}

}  // namespace tfring
