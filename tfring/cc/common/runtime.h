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
#include "ops/backend.h"
#include "ops/gpu_backend.h"
#include "tensor_queue.h"
#include "timeline.h"

namespace tfring {

class Runtime {
 public:
  static Runtime& Get();

  // comm_f: Fortran handle of the communicator to run on, or -1 for MPI_COMM_WORLD.
  Status Init(int64_t comm_f);
  void Shutdown();
  bool initialized() const { return running_; }
  Topology topology() const { return topology_; }
  const Settings& settings() const { return settings_; }
  TunedParams tuned() const { return {fusion_threshold_.load(), cycle_time_ms_.load()}; }

  // Hands entries to the background thread; each entry's callback runs exactly once.
  void Enqueue(std::vector<TensorEntry> entries);
  Status CheckReady() const;
  // Rank 0 writes the timeline; on other ranks these are no-ops.
  Status StartTimeline(const std::string& path, bool mark_cycles);
  void StopTimeline();

 private:
  Runtime() = default;
  void Loop();
  void Perform(const Response& response);
  // Hands a GPU response to the GPU backend; false (with *status set) if the callbacks are still ours to run.
  bool PerformOnGpu(const Response& response, std::vector<TensorEntry>* taken, Status* status);
  void FailAll(const Status& status);

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
  std::unique_ptr<TensorQueue> queue_;
  std::unique_ptr<Controller> controller_;
  std::thread thread_;
  Timeline timeline_;
  // Current values of the tunable knobs (the settings' values unless autotune changed them); background thread.
  std::atomic<int64_t> fusion_threshold_{0};
  std::atomic<double> cycle_time_ms_{0};
  std::unique_ptr<Autotuner> autotuner_;  // rank 0 with TFRING_AUTOTUNE=1
};

}  // namespace tfring
