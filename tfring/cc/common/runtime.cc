#include "runtime.h"

#include <algorithm>
#include <chrono>

#include "fusion.h"
#include "logging.h"

namespace tfring {

namespace {

// Payload bytes of a response, the autotuner's measure of throughput (collectives fusion can speed up).
int64_t PayloadBytes(const Response& r) {
  if (r.kind != Response::OK) return 0;
  int64_t n = 0;
  if (r.op == OpType::ALLREDUCE || r.op == OpType::REDUCESCATTER)
    for (int64_t s : r.sizes) n += s;
  else if (r.op == OpType::BROADCAST)
    n = NumElements(r.shape);
  return n * DataTypeSize(r.dtype);
}

constexpr std::chrono::microseconds kIdleWait(100000);

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Runtime& Runtime::Get() {
  static Runtime* runtime = new Runtime();  // never destroyed: safe to use during interpreter exit
  return *runtime;
}

Status Runtime::Init(int64_t comm_f) {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (running_) return Status::OK();
  settings_ = Settings::FromEnvironment();
  SetLogLevel(settings_.log_level);
  std::unique_ptr<Backend> backend;
  TFR_RETURN_IF_ERROR(CreateMpiBackend(comm_f, settings_.mpi_max_count, &backend));
  backend_ = std::move(backend);
  topology_ = backend_->topology();
#ifdef TFRING_HAVE_NCCL
  TFR_RETURN_IF_ERROR(CreateNcclBackend(backend_->transport(), topology_.rank, topology_.size,
                                        settings_.gpu_timeout_seconds, &gpu_backend_));
#endif
  SetLogRank(topology_.rank);
  queue_.reset(new TensorQueue());
  ControllerOptions options;
  options.cache_capacity = settings_.cache_capacity;
  options.stall.warn_seconds = settings_.stall_check_seconds;
  options.stall.shutdown_seconds = settings_.stall_shutdown_seconds;
  if (topology_.rank == 0) options.timeline = &timeline_;
  backend_->SetTimeline(topology_.rank == 0 ? &timeline_ : nullptr);
  if (!settings_.timeline_path.empty()) TFR_RETURN_IF_ERROR(StartTimeline(settings_.timeline_path,
                                                                          settings_.timeline_mark_cycles));
  options.stall.clock = Now;
  controller_.reset(new Controller(backend_->transport(), *queue_, options));
  fusion_threshold_ = settings_.fusion_threshold_bytes;
  cycle_time_ms_ = settings_.cycle_time_ms;
  // Fusion decides how many MPI calls a cycle makes, so every rank must use the same threshold: rank 0's values
  // go to every rank in the first cycle, whatever each rank's environment says.
  if (topology_.rank == 0) controller_->ProposeParameters({fusion_threshold_, cycle_time_ms_});
  autotuner_.reset();
  if (settings_.autotune && topology_.rank == 0) {
    AutotuneOptions tune;
    tune.log_path = settings_.autotune_log;
    tune.warmup_samples = settings_.autotune_warmup_samples;
    tune.sample_seconds = settings_.autotune_sample_seconds;
    tune.samples_per_candidate = settings_.autotune_samples_per_candidate;
    autotuner_.reset(new Autotuner({fusion_threshold_, cycle_time_ms_}, tune));
  }
  shutdown_requested_ = false;
  shutdown_rank_ = -1;
  loop_done_ = false;
  loop_status_ = Status::OK();
  running_ = true;
  thread_ = std::thread(&Runtime::Loop, this);
  TFR_LOG(TFR_DEBUG, "initialized: size " << topology_.size << ", fusion " << settings_.fusion_threshold_bytes
                                          << " B, cycle " << settings_.cycle_time_ms << " ms");
  return Status::OK();
}

void Runtime::Shutdown() {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (!running_) return;
  shutdown_requested_ = true;
  queue_->Wake();
  if (thread_.joinable()) thread_.join();
  // Finalized but kept: an Enqueue that passed CheckReady just before the loop ended may still call it.
  if (gpu_backend_) gpu_backend_->Finalize();
  backend_->Finalize();
  timeline_.Stop();
  controller_.reset();
  backend_.reset();
  running_ = false;
}

Status Runtime::CheckReady() const {
  if (!running_)
    return Status::PreconditionError("tfring has not been initialized (or was shut down); call tfring.init() first");
  if (loop_done_) {
    if (!loop_status_.ok()) return loop_status_;
    const int by = shutdown_rank_;
    if (by >= 0 && by != topology_.rank)
      return Status::Aborted("tfring was shut down by rank " + std::to_string(by) +
                             " (it called shutdown() or its process is exiting); no more collectives can run");
    return Status::Aborted("tfring has been shut down; no more collectives can run");
  }
  return Status::OK();
}

Status Runtime::StartTimeline(const std::string& path, bool mark_cycles) {
  if (topology_.rank != 0) return Status::OK();
  if (!timeline_.Start(path, mark_cycles))
    return Status::InvalidArgument("tfring: cannot open the timeline file '" + path + "' for writing");
  return Status::OK();
}

void Runtime::StopTimeline() { timeline_.Stop(); }

void Runtime::Enqueue(std::vector<TensorEntry> entries) {
  Status s = CheckReady();
  if (s.ok() && timeline_.enabled())
    for (const auto& e : entries) timeline_.NegotiateStart(e.request.name, OpTypeName(e.request.op));
  for (const auto& e : entries) TFR_LOG(TFR_TRACE, "enqueue " << e.request.name);
  for (auto& e : entries) {
    if (!s.ok() || e.request.device < 0) continue;
    if (!gpu_backend_)
      s = Status::PreconditionError("tfring: tensor '" + e.request.name + "' is on a GPU but this tfring build has "
                                    "no GPU support (rebuild with TFRING_GPU_OPERATIONS=NCCL)");
    else
      s = gpu_backend_->RecordReady(&e);
  }
  if (s.ok()) {
    s = queue_->Add(entries);  // moves the entries in, or leaves them here if it refuses the batch
    if (s.ok()) {
      // The loop may have ended between the check and the add; it drains again after finishing.
      if (loop_done_) FailAll(CheckReady());
      return;
    }
  }
  for (auto& e : entries) e.callback(s);
}

void Runtime::FailAll(const Status& status) {
  for (auto& e : queue_->DrainAll()) e.callback(status);
}


void Runtime::Loop() {
  while (true) {
    // A rank with nothing outstanding does not negotiate every cycle: it waits for work (or the idle wait, so
    // shutdown, stall reports and joined peers still progress). Every cycle is a collective, and a peer that
    // is busy computing would otherwise have its core taken by two background threads spinning in MPI.
    const auto cycle = std::chrono::microseconds(static_cast<int64_t>(cycle_time_ms_ * 1000));
    queue_->WaitForWork(cycle, std::max(cycle, kIdleWait));
    timeline_.Cycle();
    ResponseList list;
    Status s = controller_->ComputeResponseList(shutdown_requested_, &list);
    if (!s.ok()) {
      TFR_LOG(TFR_ERROR, "negotiation failed, stopping: " << s.message());
      loop_status_ = s;
      break;
    }
    if (list.tuned_fusion_threshold >= 0) {  // rank 0's settings (at start, or autotune): all switch this cycle
      fusion_threshold_ = list.tuned_fusion_threshold;
      cycle_time_ms_ = list.tuned_cycle_time_ms;
      TFR_LOG(TFR_DEBUG, "settings from rank 0: fusion " << fusion_threshold_ << " B, cycle " << cycle_time_ms_
                                                        << " ms");
    }
    int64_t bytes = 0;
    for (const Response& r : PlanFusion(std::move(list.responses), fusion_threshold_)) {
      if (autotuner_) bytes += PayloadBytes(r);  // only the autotuner reads it
      Perform(r);
    }
    if (autotuner_) {
      autotuner_->Record(bytes, Now());
      TunedParams next;
      if (autotuner_->TakeProposal(&next)) controller_->ProposeParameters(next);
    }
    if (list.shutdown) {
      shutdown_rank_ = list.shutdown_rank;
      break;
    }
  }
  loop_done_ = true;
  FailAll(CheckReady());
}

void Runtime::Perform(const Response& response) {
  std::vector<TensorEntry> taken(response.names.size());
  std::vector<TensorEntry*> entries(response.names.size(), nullptr);
  for (size_t i = 0; i < response.names.size(); ++i)
    if (queue_->Take(response.names[i], &taken[i])) entries[i] = &taken[i];
  Status status;
  if (response.kind == Response::OK && !response.devices.empty()) {
    if (PerformOnGpu(response, &taken, &status)) return;
  } else if (response.kind == Response::ERROR) {
    status = Status::InvalidArgument(response.error);
  } else if (response.op == OpType::JOIN) {
    for (auto* e : entries)
      if (e && e->join_result) *e->join_result = response.last_joined_rank;
  } else {
    TimelineActivity activity(&timeline_, response.names, "EXECUTE");
    status = backend_->Execute(response, entries);
  }
  if (!status.ok()) TFR_LOG(TFR_DEBUG, "collective failed: " << status.message());
  for (size_t i = 0; i < entries.size(); ++i)
    TFR_LOG(TFR_TRACE, "done " << response.names[i] << (entries[i] ? "" : " (no local entry)"));
  for (auto* e : entries)
    if (e) e->callback(status);
}

bool Runtime::PerformOnGpu(const Response& response, std::vector<TensorEntry>* taken, Status* status) {
  if (!gpu_backend_) {
    *status = Status::PreconditionError("tfring: this build has no GPU support");
    return false;
  }
  for (size_t i = 0; i < taken->size(); ++i)
    if (!(*taken)[i].callback) {  // every rank holds every GPU tensor (join is refused for GPU tensors)
      *status = Status::Unknown("tfring: GPU tensor '" + response.names[i] + "' is missing from this rank's queue");
      return false;
    }
  *status = gpu_backend_->Execute(response, taken);
  return status->ok();
}

}  // namespace tfring
