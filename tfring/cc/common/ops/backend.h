// A backend runs negotiated collectives and provides the negotiation transport. MPI is the CPU
// backend; every call into it happens on the runtime's background thread.
#pragma once
#include <memory>
#include <vector>

#include "../message.h"
#include "../tensor.h"
#include "../transport.h"

namespace tfring {

class Timeline;

struct Topology {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  bool homogeneous = true;
  bool threads_supported = false;
  int min_cpu_milli_per_rank = 1000;  // job-wide (MpiContext)
  std::vector<int> host_of;           // each rank's host (index); ranks sharing a GPU are staged (ops/staging.h)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Transport& transport() = 0;
  virtual Topology topology() const = 0;
  // entries[i] matches response.names[i]; nullptr where this rank has no entry (it joined).
  virtual Status Execute(const Response& response, const std::vector<TensorEntry*>& entries) = 0;
  virtual void Finalize() = 0;
  // After a worker failed: makes every peer's pending and future calls on this backend fail (no-op without ULFM).
  virtual void Revoke() {}
  // A failed call's status, as WORKERS_FAILED where a peer's death caused it (MpiContext::Explain).
  virtual Status Explain(const Status& s) const { return s; }
  virtual bool FaultTolerant() const { return false; }  // ULFM: peers survive a failure (revoke reaches them)
  virtual void SetTimeline(Timeline* timeline) = 0;
  // TunedParams::hierarchical bits; every rank of the backend sets the same value before the same collective.
  virtual void SetHierarchical(int bits) = 0;  // phases inside a collective (copy in, MPI call, copy out)
  // A backend over the subset `ranks` (ascending, in this backend's numbering): collective over every rank of
  // this backend; ranks outside the subset get null.
  virtual Status CreateSubset(const std::vector<int>& ranks, std::unique_ptr<Backend>* out) = 0;
};

struct MpiOptions {
  int64_t max_count = 2147483647, chunk_bytes = 0;            // per MPI call (mpi_context.h)
  double stall_warn_seconds = 0, stall_shutdown_seconds = 0;  // the negotiation's deadlines (ops/mpi/transport.h)
};

// comm_f: Fortran handle of an MPI communicator, or -1 for MPI_COMM_WORLD.
Status CreateMpiBackend(int64_t comm_f, const MpiOptions& options, std::unique_ptr<Backend>* out);

}  // namespace tfring
