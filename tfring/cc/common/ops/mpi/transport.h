// The negotiation transport over MPI, with deadlines. Every call is a non-blocking collective that the background
// thread polls, so a rank that stops responding (a frozen process, a hung call, a link that drops silently) cannot
// hold the others forever: while it polls, a rank answers pings, and the stall settings' census (census.h) names
// the silent ranks at the warning time. Past the shutdown time the call is abandoned on every live rank with an
// error naming them (and their hosts), the communicator is not used again, and finalizing ends the job
// (MPI_Abort), since MPI_Finalize would wait for the silent ranks. In an elastic job (ULFM) the silent ranks are
// ended instead, by a live rank on their host, and the survivors recover as after a kill.
#pragma once
#include <string>
#include <vector>

#include "../../transport.h"
#include "mpi_context.h"

namespace tfring {

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

  MpiContext& ctx_;
};

}  // namespace tfring
