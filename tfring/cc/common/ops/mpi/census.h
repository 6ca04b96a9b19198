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
// Elastic (ULFM): the job goes on without the silent ranks. The lowest answering rank on each silent rank's host
// SIGKILLs it (a silent neighbour is frozen, never cut off). With the elastic launcher's hook (set by the Python
// side), every answering rank then asks the launcher, the arbiter between the sides of a cut link, to go on: a rank
// refused, or that cannot reach it, is the one cut off and ends itself (SIGKILL); the others declare the silent
// ranks failed to MPI (declare_failed.h: a cut-off process never dies where MPI can see it), and the lowest
// answering rank asks the launcher to end those with no live rank on their host. Without a hook only the
// same-host kills happen, and a wait on an unended rank fails at the end of its grace.
void EndSilent(const MpiContext& ctx, const std::vector<int>& silent);
// hook(this rank, its host, its pid, n, the silent ranks, their hosts, their pids, whether each has no live rank
// on its host, whether this rank is the one to ask for those to be ended): ranks in tfring's global set, hosts as
// the launcher names them. Returns 1: go on; 0: this rank must end; -1: no launcher to ask. Called on a thread
// of its own. Null: none.
typedef int (*SilentHook)(int rank, const char* host, int pid, int n, const int* ranks, const char* const* hosts,
                          const int* pids, const int* alone, int ask);
void SetSilentHook(SilentHook hook);

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
