// The negotiation transport over MPI, with deadlines. Every call is a non-blocking collective that the background
// thread polls, so a rank that stops responding (a frozen process, a hung call, a link that drops silently) cannot
// hold the others forever. While it polls, a rank answers pings on a communicator of its own (census_comm).
// Past the stall warning time a census (a ping to every rank, 1 s for the answers) names the ranks that do not
// answer; past the stall shutdown time the call is abandoned on every live rank with an error naming them (and
// their hosts), the communicator is not used again, and finalizing ends the job (MPI_Abort), since MPI_Finalize
// would wait for the silent ranks. A census every rank answers means the wait is legitimate: it goes on. In an
// elastic job (ULFM) the silent ranks are ended instead, by a live rank on their host, and the survivors recover
// as after a kill; with no live rank on a silent rank's host, the job fails as above.
#pragma once
#include <deque>
#include <string>
#include <vector>

#include "../../transport.h"
#include "mpi_context.h"

namespace tfring {

// Every live census communicator of this process: a rank waiting in any transport answers pings on all of them,
// so a rank held up in a process set's negotiation is not taken for a silent one in the global set's.
void RegisterCensusComm(MPI_Comm comm);
void UnregisterCensusComm(MPI_Comm comm);

class MpiTransport : public Transport {
 public:
  explicit MpiTransport(MpiContext& ctx) : ctx_(ctx) {}
  int rank() const override { return ctx_.rank; }
  int size() const override { return ctx_.size; }
  Status AllreduceBitAnd(std::vector<uint64_t>* bits) override;
  Status GatherToRoot(const std::string& mine, std::vector<std::string>* all) override;
  Status BroadcastFromRoot(std::string* bytes) override;

 private:
  // Polls `request` until it completes, warning and abandoning it as described above. `what`: for messages.
  Status Wait(MPI_Request* request, const char* what);
  void AnswerPings();
  void EndSilent(const std::vector<int>& silent);  // elastic: SIGKILL each one from a live rank on its host
  std::vector<int> Census();                       // ranks of ctx_.comm that did not answer a ping within 1 s
  std::string Describe(const std::vector<int>& ranks) const;

  MpiContext& ctx_;
  int census_seq_ = 0;
};

}  // namespace tfring
