// The one process-wide mutable object. Owns the backend, the queue, the controller and the background
// thread that makes every backend call. Framework threads only Enqueue and wait for their callback.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "autotune.h"
#include "controller.h"
#include "env.h"
#include "monitor.h"
#include "ops/backend.h"
#include "ops/gpu_backend.h"
#include "ops/staging.h"
#include "process_set.h"
#include "tensor_queue.h"
#include "timeline.h"

namespace tfring {

class Runtime {
 public:
  static Runtime& Get();

  // comm_f: Fortran handle of the communicator to run on, or -1 for MPI_COMM_WORLD. static_sets: process sets
  // (ascending ranks of that communicator) every rank passes alike; they get ids 1, 2, ... in this order.
  Status Init(int64_t comm_f, const std::vector<std::vector<int>>& static_sets = {});
  void Shutdown();
  bool initialized() const { return running_; }
  Topology topology() const { return topology_; }
  const Settings& settings() const { return settings_; }
  TunedParams tuned() const { return {fusion_threshold_.load(), cycle_time_ms_.load(), hierarchical_.load()}; }

  // Hands entries to the background thread; each entry's callback runs exactly once.
  void Enqueue(std::vector<TensorEntry> entries, int process_set_id = 0);
  Status CheckReady() const;
  // OK if the set exists and this rank is in it, else an InvalidArgument naming both. `set`: the looked-up set
  // (null: look it up).
  Status CheckMember(int process_set_id, const ProcessSet* set = nullptr) const;
  // Size, rank, local size and rank within the set (-1 for the ranks of a non-member); false if no such set.
  bool SetTopology(int process_set_id, Topology* out, bool* included) const;
  std::vector<std::pair<int, std::vector<int>>> ProcessSets() const;
  // Adds (ranks) or removes (remove_id >= 0) a process set; every rank must call it alike. Blocks until done;
  // *id: the new set's id, the removed id, or -1 if the set already exists / does not exist.
  Status ChangeProcessSet(const std::vector<int>& ranks, int remove_id, int* id);
  // Rank 0 writes the timeline; other ranks record their events for it (unless TFRING_TIMELINE_RANK0_ONLY).
  Status StartTimeline(const std::string& path, bool mark_cycles);
  void StopTimeline();
  Monitor& monitor() { return monitor_; }

 private:
  Runtime() = default;
  void Loop();
  // Negotiates one set's cycle and runs its responses; false (loop_status_ set) if negotiation failed.
  bool Cycle(ProcessSet& set, bool shutdown, ResponseList* list);
  void Perform(ProcessSet& set, const Response& response);
  // Collective over the global set: creates set `id` (its communicator, queue and controller on members).
  Status CreateSet(int id, const std::vector<int>& ranks);
  Status CreateStaticSets(const std::vector<std::vector<int>>& static_sets);
  // Collective over the global set: OK on every rank only if `local` is OK on every rank.
  Status AllAgree(const Status& local, const std::string& what);
  Status ApplyProcessSetChange(const Response& response, int* id);
  void FinalizeSet(ProcessSet& set, const Status& why);
  // Hands a GPU response to the GPU backend; false (with *status set) if the callbacks are still ours to run.
  bool PerformOnGpu(const Response& response, std::vector<TensorEntry>* taken, Status* status);
  // GPU tensors through host memory over MPI (ops/staging.h) when ranks of a host share a GPU or TFRING_NCCL=0.
  bool Staged(const Response& response) const;
  // The MPI backend's run of a response (staged: GPU tensors through host memory), timed for the monitor.
  Status ExecuteOnHost(ProcessSet& set, const Response& response, const std::vector<TensorEntry*>& entries,
                       bool staged);
  void FailAll(const Status& status);
  void RevokeAll();  // every communicator of every set (no-op without ULFM)
  Status InitLocked(int64_t comm_f, const std::vector<std::vector<int>>& static_sets);
  // Revokes every communicator and records the failure (once); true.
  bool OnWorkerFailure(const Status& status);
  bool WorkerFailed() const { return loop_status_.code() == StatusCode::WORKERS_FAILED; }

  std::mutex lifecycle_mu_;
  std::atomic<bool> running_{false};
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> loop_done_{false};
  Status loop_status_;
  int shutdown_rank_ = -1;
  Settings settings_;
  Topology topology_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<GpuBackend> gpu_backend_;  // NCCL builds only; touches no GPU until a GPU tensor arrives
  std::unique_ptr<DeviceCopier> staging_;    // NCCL builds only: host staging's copies
  bool nccl_ = true;                         // rank 0's TFRING_NCCL, agreed at init
  std::shared_ptr<WorkSignal> signal_;       // every set's queue wakes the one background thread
  ProcessSetTable sets_;                     // set 0 = every rank
  ControllerOptions controller_options_;
  std::thread thread_;
  Timeline timeline_;
  Monitor monitor_;
  double cycle_oldest_ = 0;  // this cycle's oldest local submission among executed entries (background thread)
  // Current values of the tunable knobs (the settings' values unless autotune changed them); background thread.
  std::atomic<int64_t> fusion_threshold_{0};
  std::atomic<double> cycle_time_ms_{0};
  std::atomic<int> hierarchical_{0};
  std::unique_ptr<Autotuner> autotuner_;  // rank 0 with TFRING_AUTOTUNE=1
};

}  // namespace tfring
