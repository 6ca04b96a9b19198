// MPI state owned by the runtime: duplicated communicators (global, node-local, cross-node), datatype
// and reduction-op tables (with user ops for float16/bfloat16), and the fusion buffer.
#pragma once
#include <mpi.h>
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif
#if defined(MPIX_ERR_PROC_FAILED) && defined(MPIX_ERR_REVOKED)
#define TFRING_HAVE_ULFM 1  // Open MPI's fault-tolerance extension: revoke/shrink for elastic jobs
#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5
#define TFRING_HAVE_ULFM_QUERIES 1  // MPIX_Comm_get_failed and the MPI_FT attribute (Open MPI 5)
#endif
#endif

#include <algorithm>
#include <string>
#include <vector>

#include "../../checks.h"
#include "../../status.h"
#include "../../types.h"

namespace tfring {

class Timeline;

// A ULFM process-failure code (MPI_ERR_PROC_FAILED, _PENDING, MPI_ERR_REVOKED) becomes WORKERS_FAILED.
Status MpiError(const char* call, int rc);
bool IsProcessFailure(int rc);

struct MpiContext {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm local_comm = MPI_COMM_NULL;
  MPI_Comm cross_comm = MPI_COMM_NULL;
  MPI_Comm census_comm = MPI_COMM_NULL;  // pings of the transport's census (transport.h), apart from the data
  // The transport's deadlines (the stall settings; 0 = none), and whether a wait was abandoned: the communicator
  // may hold a collective the silent ranks never joined, so finalizing ends the job instead (MPI_Abort).
  double stall_warn_seconds = 0, stall_shutdown_seconds = 0;
  bool abandoned = false;
  bool revoked = false;                // Revoke() ran: Finalize keeps the communicators (see there)
  std::vector<int> world_rank;         // each rank's number in tfring's global set (messages)
  std::vector<std::string> host_name;  // each rank's host (MPI_Get_processor_name; messages)
  std::vector<int> pid;                // each rank's process id (a silent rank is ended by a peer on its host)
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  bool homogeneous = true;
  // Job-wide, agreed at init: MIN over hosts of (logical CPUs the host's ranks may run on together, capped by the
  // cgroup CPU quota) / (ranks on the host), x1000.
  int min_cpu_milli_per_rank = 1000;
  bool fault_tolerant = false;  // run under ULFM (mpirun --with-ft ulfm): the MPI_FT attribute
  // Hosts (shared-memory domains): index of each rank's host (= the cross rank of the host's first rank), the
  // ranks grouped host by host, and whether that grouping is rank order (hierarchical.cc).
  int num_hosts = 1, max_local = 1;
  std::vector<int> host_of, host_order;
  bool hosts_consecutive = true;
  bool hierarchical_allreduce = false, hierarchical_allgather = false;  // rank 0's settings (every rank alike)
  int thread_level = MPI_THREAD_SINGLE;
  std::vector<char> fusion_buffer;
  std::vector<char> scratch;     // hierarchical.cc: ring receive buffer, allgather staging (kept: no page faults)
  Timeline* timeline = nullptr;  // rank 0's timeline, or null
  // Per MPI call, rank 0's values (agreed at Init: they decide how many calls every rank makes).
  int64_t max_count = 2147483647;  // elements (TFRING_MPI_MAX_COUNT)
  int64_t chunk_bytes = 0;         // allreduce bytes, 0: max_count only (TFRING_ALLREDUCE_CHUNK_BYTES)
  // Elements of `esize` bytes per MPI call of a large reduction (allreduce chunks, ring pieces): chunk_bytes'
  // worth, at least 1, at most max_count (MPI counts are int).
  int64_t ChunkElements(int64_t esize) const {
    const int64_t by_bytes = chunk_bytes > 0 ? std::max<int64_t>(1, chunk_bytes / esize) : max_count;
    return std::min(max_count, by_bytes);
  }

  // comm_f: a Fortran handle from mpi4py's comm.py2f(), or -1 for MPI_COMM_WORLD.
  Status Init(int64_t comm_f);
  Status Init(MPI_Comm base);  // duplicates base
  void Finalize();
  // Revokes every communicator (ULFM builds): peers blocked in a call on them return MPI_ERR_REVOKED.
  void Revoke();
  // An MPI error that is not a ULFM code can still come from a dead peer (a root's MPI_Bcast to a rank that just
  // died returned MPI_ERR_OTHER once in CI): under ULFM, waits up to 2 s for a failed process on comm (or comm
  // revoked by a survivor) and then reports WORKERS_FAILED, so every survivor sees the same error class. Where
  // none shows, the caller revokes anyway (Runtime::Cycle), so no peer waits for this rank.
  Status Explain(const Status& s) const;
  MPI_Datatype Type(DataType t) const;
  MPI_Op Op(ReduceOp op, DataType t) const;
  // Average of float32/float64 over exactly two ranks (comm): an op that halves as it adds, so the result needs no
  // division afterwards; MPI_OP_NULL where that does not apply.
  MPI_Op PairMeanOp(ReduceOp op, DataType t) const;
  // Average of float32/float64 in the last reduction step of a ring over `divisor` ranks: adds, then divides by
  // divisor (the pair mean at 2). For MPI_Reduce_local on the calling thread only; MPI_OP_NULL where it does not apply.
  MPI_Op MeanLastOp(ReduceOp op, DataType t, int divisor) const;
};

}  // namespace tfring
