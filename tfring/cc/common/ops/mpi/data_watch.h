// The deadline of a data collective. The collectives block in MPI on the background thread (the tuned blocking
// calls are the fast ones), so a rank that freezes while its peers are inside a transfer would hold them forever.
// A watch thread per communicator does for them what the negotiation's polled waits do (census.h): while a
// transfer lasts it answers the peers' pings, from the warning time on it names the ranks that stopped responding,
// and at the shutdown time it gives up. Outside elastic mode a blocked MPI call cannot be abandoned: every live
// rank logs the error and the job ends (MPI_Abort), so the launcher exits non-zero. In an elastic job (ULFM) the
// silent ranks are ended as in the negotiation and MPI fails the transfer as after a kill; where that does not
// happen within the grace, the watch revokes the communicators and the transfer fails with the deadline's error.
// A transfer that still has not returned a while after the revoke (the backstop, max(5 s, the shutdown time): MPI
// did not give the call back) ends this process, so that its peers see a failed rank and go on, never a hang.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "../../message.h"
#include "../../status.h"
#include "mpi_context.h"

namespace tfring {

class DataWatch {
 public:
  explicit DataWatch(MpiContext& ctx);
  ~DataWatch() { Stop(); }
  // Starts the thread where the stall settings ask for deadlines and MPI allows a second calling thread.
  void Start();
  void Stop();
  // Around each collective, on the background thread (`r` lives until End; no string is built unless the transfer
  // lasts). End returns `s`, or the deadline's error where the watch gave up on this transfer.
  void Begin(const Response& r);
  Status End(Status s);

 private:
  void Loop();

  MpiContext& ctx_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool running_ = false, stop_ = false, active_ = false, gave_up_ = false;
  uint64_t seq_ = 0;  // the transfer in flight (a new SilenceCheck for each)
  double start_ = 0, gave_up_at_ = 0;
  bool hold_failed_ = false;            // tests: a failed transfer never ends (TFRING_TEST_HOLD_FAILED_TRANSFER)
  const Response* response_ = nullptr;  // the transfer in flight, valid while active_
  Status failure_;
  std::thread thread_;
};

}  // namespace tfring
