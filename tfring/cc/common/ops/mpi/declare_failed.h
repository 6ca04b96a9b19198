// Telling ULFM that a rank failed when nothing else will: a rank cut off by a dropped link (or on a frozen machine
// that cannot be reached to be killed) never dies where Open MPI can see it, so the survivors' collectives would wait
// for it forever and the shrink's agreement with them. Open MPI's runtime learns of failures from its daemons; this
// is the in-process entry its own heartbeat detector uses (ompi_errhandler_proc_failed_internal), found at run time,
// so a build against another MPI loads and simply cannot declare.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <vector>

namespace tfring {

// Open MPI's opal_process_name_t: the job and the rank within it (two 32-bit fields in every 5.x release).
struct MpiProcessName {
  uint32_t jobid, vpid;
};

// The process names of `ranks` of `comm` (a local operation); empty where the MPI lacks the entry points.
std::vector<MpiProcessName> ProcessNames(MPI_Comm comm, const std::vector<int>& ranks);
// Marks each process failed in this process only (no forwarding: every survivor declares the same ranks itself):
// its pending operations with them fail with MPI_ERR_PROC_FAILED and MPIX_Comm_shrink leaves them out. Any thread
// (MPI_THREAD_MULTIPLE). Returns false when it could not (not Open MPI with ULFM).
bool DeclareFailed(const std::vector<MpiProcessName>& names);

}  // namespace tfring
