// Telling a silent rank from a busy one, for every wait that could otherwise last forever (the negotiation's
// polled waits, transport.h; a data collective blocked in MPI, data_watch.h). While it waits, a rank answers
// pings on a communicator of its own (census_comm); a census pings every rank and names those that do not answer
// within 1 s. A census every rank answers means the wait is legitimate (a long step, a large transfer): it goes on.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "../../status.h"
#include "mpi_context.h"

namespace tfring {

// Every live census communicator of this process: a rank waiting anywhere answers pings on all of them, so a rank
// held up in a process set's collective is not taken for a silent one in the global set's.
void RegisterCensusComm(MPI_Comm comm);
void UnregisterCensusComm(MPI_Comm comm);
// Answers the pings waiting on every census communicator. Any thread; skipped while another thread takes a census
// (that one answers them meanwhile).
void AnswerPings();
// Ranks of ctx.comm that did not answer a ping within 1 s (any thread; one census at a time per process).
std::vector<int> Census(const MpiContext& ctx);
// "rank 2 (host h1)", "ranks 1 (host a), 3 (host b)": in tfring's global numbering.
std::string Describe(const MpiContext& ctx, const std::vector<int>& ranks);
// Elastic (ULFM): the lowest answering rank on each silent rank's host SIGKILLs it; MPI then reports it failed.
// A silent rank with no live rank on its host (its whole machine silent, or it ran alone there) is ended by the
// launcher instead: the lowest answering rank calls the end hook (set by the elastic Python side, which asks the
// launcher over its channel). Without a hook it is not ended, and the wait fails at the end of its grace.
void EndSilent(const MpiContext& ctx, const std::vector<int>& silent);
// hook(rank in tfring's global set, its host as the launcher names it, its pid), called on a thread of its own.
// Null: none.
typedef void (*EndSilentHook)(int rank, const char* host, int pid);
void SetEndSilentHook(EndSilentHook hook);

// One wait's deadlines (the stall settings): from the warning time on, a census at every warning interval names
// the silent ranks (a warning); the last census before the shutdown time decides. Outside elastic mode the wait
// then fails naming them; in an elastic job they are ended first and the wait gets 10 s for MPI to report it.
class SilenceCheck {
 public:
  SilenceCheck(const MpiContext& ctx, std::string what, double start);
  // Called while the wait goes on. True: give up, with *failure (DEADLINE_EXCEEDED) naming the silent ranks.
  // still_waiting (from another thread than the waiting one): asked after the census, which takes up to 1 s; once
  // the wait has ended meanwhile (it completed, or failed with a peer's death), nothing is said or decided.
  bool Poll(Status* failure, const std::function<bool()>& still_waiting = nullptr);

 private:
  const MpiContext& ctx_;
  std::string what_;
  double start_, warn_at_, give_up_at_;
  bool ended_silent_ = false;
};

}  // namespace tfring
