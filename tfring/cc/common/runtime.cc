#include "runtime.h"
#include "clock.h"

#include <thread>

#include <algorithm>
#include <chrono>

#include "fusion.h"
#include "logging.h"
#include "names.h"

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

// The bytes this rank's entries of a collective hold (allgather: what it received), for the monitor.
int64_t LocalBytes(OpType op, const std::vector<TensorEntry*>& entries) {
  int64_t n = 0;
  for (const TensorEntry* e : entries) {
    if (!e) continue;
    const auto& t = op == OpType::ALLGATHER ? e->output : e->input;
    if (t) n += t->size_bytes();
  }
  return n;
}

constexpr std::chrono::microseconds kIdleWait(100000);

double Now() { return SteadySeconds(); }

}  // namespace

Runtime& Runtime::Get() {
  static Runtime* runtime = new Runtime();  // never destroyed: safe to use during interpreter exit
  return *runtime;
}

Status Runtime::Init(int64_t comm_f, const std::vector<std::vector<int>>& static_sets) {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (running_) return Status::OK();
  Status s = InitLocked(comm_f, static_sets);
  // A worker failed while the runtime started (an elastic reset's retry): revoke what was built, so a peer that
  // got past the failed step returns from its next collective instead of waiting in it.
  if (s.code() == StatusCode::WORKERS_FAILED && backend_) RevokeAll();
  return s;
}

Status Runtime::InitLocked(int64_t comm_f, const std::vector<std::vector<int>>& static_sets) {
  UnnamedCounts::Get().RestartAll();  // unnamed collectives are numbered from 1 again on every rank
  settings_ = Settings::FromEnvironment();
  SetLogLevel(static_cast<int>(settings_.log_level));
  std::unique_ptr<Backend> backend;
  MpiOptions mpi;
  mpi.max_count = settings_.mpi_max_count;
  mpi.chunk_bytes = settings_.allreduce_chunk_bytes;
  mpi.stall_warn_seconds = settings_.stall_check_seconds;
  mpi.stall_shutdown_seconds = settings_.stall_shutdown_seconds;
  TFR_RETURN_IF_ERROR(CreateMpiBackend(comm_f, mpi, &backend));
  backend_ = std::move(backend);
  topology_ = backend_->topology();
#ifdef TFRING_HAVE_NCCL
  std::string nccl = settings_.nccl ? "1" : "0";  // rank 0's: every rank must stage the same collectives
  TFR_RETURN_IF_ERROR(backend_->transport().BroadcastFromRoot(&nccl));
  nccl_ = nccl == "1";
  staging_ = CreateCudaCopier();
  TFR_RETURN_IF_ERROR(CreateNcclBackend(backend_->transport(), topology_.rank, topology_.size,
                                        settings_.gpu_timeout_seconds, &gpu_backend_));
#endif
  SetLogRank(topology_.rank);
  signal_ = std::make_shared<WorkSignal>();
  controller_options_ = ControllerOptions();
  controller_options_.cache_capacity = settings_.cache_capacity;
  controller_options_.stall.warn_seconds = settings_.stall_check_seconds;
  controller_options_.stall.shutdown_seconds = settings_.stall_shutdown_seconds;
  controller_options_.stall.clock = Now;
  backend_->SetTimeline(&timeline_);
  MonitorOptions monitor;
  monitor.enabled = settings_.monitor;
  monitor.stragglers = settings_.straggler_check;
  monitor.straggler_min_ms = settings_.straggler_min_ms;
  monitor.warn_seconds = settings_.straggler_warn_seconds;
  monitor.straggler_steps = settings_.straggler_steps;
  monitor.interval_seconds = settings_.monitor_interval_seconds;
  monitor.metrics_file = settings_.metrics_file;
  std::string monitor_error;
  const bool monitor_ok = monitor_.Configure(monitor, topology_.rank, topology_.size, &timeline_, &monitor_error);
  std::vector<int> everyone(topology_.size);
  for (int i = 0; i < topology_.size; ++i) everyone[i] = i;
  sets_.Clear();
  TFR_RETURN_IF_ERROR(CreateSet(0, everyone));
  // Rank 0 alone may fail to open the timeline: every rank learns it (no rank left waiting in a collective).
  Status timeline = settings_.timeline_path.empty()
                        ? Status::OK()
                        : StartTimeline(settings_.timeline_path, settings_.timeline_mark_cycles);
  TFR_RETURN_IF_ERROR(AllAgree(timeline, "open the timeline file"));
  TFR_RETURN_IF_ERROR(
      AllAgree(monitor_ok ? Status::OK() : Status::InvalidArgument(monitor_error), "open the metrics file"));
  TFR_RETURN_IF_ERROR(CreateStaticSets(static_sets));
  fusion_threshold_ = settings_.fusion_threshold_bytes;
  cycle_time_ms_ = settings_.cycle_time_ms;
  hierarchical_ = (settings_.hierarchical_allreduce ? 1 : 0) | (settings_.hierarchical_allgather ? 2 : 0);
  // Fusion decides how many MPI calls a cycle makes, so every rank must use the same threshold: rank 0's values
  // go to every rank in the first cycle, whatever each rank's environment says.
  auto global = sets_.Get(0);
  if (topology_.rank == 0) global->controller->ProposeParameters(tuned());
  autotuner_.reset();
  if (settings_.autotune && topology_.rank == 0) {
    AutotuneOptions tune;
    tune.log_path = settings_.autotune_log;
    tune.warmup_samples = static_cast<int>(settings_.autotune_warmup_samples);
    tune.sample_seconds = settings_.autotune_sample_seconds;
    tune.samples_per_candidate = static_cast<int>(settings_.autotune_samples_per_candidate);
    // Hierarchical allreduce only changes anything with several hosts and a host holding several ranks.
    tune.tune_hierarchical = topology_.cross_size > 1 && (topology_.local_size > 1 || !topology_.homogeneous);
    autotuner_.reset(new Autotuner(tuned(), tune));
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
  signal_->Notify();
  if (thread_.joinable()) thread_.join();
  // Finalized but kept: an Enqueue that passed CheckReady just before the loop ended may still call it.
  if (gpu_backend_) gpu_backend_->Finalize();
  for (auto& set : sets_.All())
    if (set->owned) set->owned->Finalize();
  backend_->Finalize();
  timeline_.Stop();
  sets_.Clear();
  backend_.reset();
  UnnamedCounts::Get().RestartAll();
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
  if (topology_.rank != 0 && settings_.timeline_rank0_only) return Status::OK();
  if (!timeline_.Start(path, mark_cycles, topology_.rank))
    return Status::InvalidArgument("tfring: cannot open the timeline file '" + path + "' for writing");
  return Status::OK();
}

void Runtime::StopTimeline() {
  // Rank 0 closes the file after one more monitor round, so it holds the other ranks' last events (they stop
  // recording when they call this; what they buffered goes in that round). Bounded: a job whose cycles stall
  // (a rank gone) closes it after 5 s without them.
  if (running_ && !loop_done_ && topology_.rank == 0 && topology_.size > 1 && timeline_.enabled() &&
      !settings_.timeline_rank0_only) {
    const uint64_t round = monitor_.RequestRound();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (monitor_.rounds_done() < round && !loop_done_ && std::chrono::steady_clock::now() < deadline) {
      signal_->Notify();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  timeline_.Stop();
}

void Runtime::Enqueue(std::vector<TensorEntry> entries, int process_set_id) {
  Status s = CheckReady();
  // One lookup: ids are reused, so a second lookup could find another set with the same id.
  std::shared_ptr<ProcessSet> set = sets_.Get(process_set_id);
  if (s.ok()) s = CheckMember(process_set_id, set.get());
  if (s.ok() && timeline_.enabled())
    for (const auto& e : entries) timeline_.NegotiateStart(e.request.name, OpTypeName(e.request.op));
  const double now = Now();
  for (auto& e : entries) e.submitted = now;
  for (const auto& e : entries) TFR_LOG(TFR_TRACE, "enqueue " << e.request.name);
  for (auto& e : entries) {
    if (!s.ok()) break;
    // Horovod's broadcast root is a global rank; the set negotiates in its own numbering (a root outside the
    // set travels as -1 - root so the coordinator reports it on every rank).
    if (process_set_id != 0 && e.request.op == OpType::BROADCAST) {
      if (e.request.root_rank < 0) {
        s = Status::InvalidArgument("tfring: broadcast of tensor '" + e.request.name + "': root_rank=" +
                                    std::to_string(e.request.root_rank) + " must be a global rank >= 0");
        break;
      }
      const int local = set->rank_in_set(e.request.root_rank);
      e.request.root_rank = local >= 0 ? local : -1 - e.request.root_rank;
    }
    if (e.request.device < 0) continue;
    if (!gpu_backend_)
      s = Status::PreconditionError("tfring: tensor '" + e.request.name +
                                    "' is on a GPU but this tfring build has "
                                    "no GPU support (rebuild with TFRING_GPU_OPERATIONS=NCCL)");
    else if (process_set_id != 0)
      s = Status::InvalidArgument("tfring: tensor '" + e.request.name +
                                  "' is on a GPU: GPU collectives run on the "
                                  "global process set only (process_set_id=" +
                                  std::to_string(process_set_id) + ")");
    else
      s = gpu_backend_->RecordReady(&e);
  }
  if (s.ok()) {
    s = set->queue->Add(entries);  // moves the entries in, or leaves them here if it refuses the batch
    if (s.ok()) {
      // The loop may have ended between the check and the add: its FailAll closed the queues it saw; this one
      // may already be out of the table (shutdown), so close it here too.
      if (loop_done_) {
        const Status why = CheckReady();
        for (auto& e : set->queue->Close(why)) e.callback(why);
      }
      return;
    }
  }
  for (auto& e : entries) e.callback(s);
}

void Runtime::FailAll(const Status& status) {
  // Close, not just drain: an Enqueue racing with the end of the loop is refused instead of stranded.
  for (auto& set : sets_.All())
    if (set->queue)
      for (auto& e : set->queue->Close(status)) e.callback(status);
}

void Runtime::Loop() {
  auto last_cycle = std::chrono::steady_clock::now();
  while (true) {
    // A rank with nothing outstanding does not negotiate every cycle: it waits for work (or the idle wait, so
    // shutdown, stall reports and joined peers still progress). Every cycle is a collective, and a peer that
    // is busy computing would otherwise have its core taken by two background threads spinning in MPI.
    // With process sets, every rank negotiates every cycle (as Horovod does): the global set's negotiation is a
    // collective of all ranks, and a rank idling in the global set would hold up the other sets' cycles.
    // Work that is still queued after a cycle waits for other ranks: the next cycle comes one cycle time after
    // the last one started, not at each new local enqueue. A burst of collectives (a graph's gradients) then
    // shares a few cycles instead of one negotiation per tensor, each a collective whose waiting rank spins in
    // MPI on the cores that produce the remaining gradients (measured: 214 gradients enqueued over 107 ms
    // instead of 13). A collective arriving at an empty queue still starts a cycle at once (low latency), and so
    // does a single submission arriving after a cycle that left nothing waiting: back-to-back eager collectives
    // pay no cycle floor (measured: a 64 KiB eager allreduce took one 1 ms cycle), while two or more new
    // submissions (a burst in progress) keep the spacing.
    const auto cycle = std::chrono::microseconds(static_cast<int64_t>(cycle_time_ms_ * 1000));
    const auto sets = sets_.All();
    bool queued = false, waiting = false;
    for (const auto& set : sets) {
      if (!set->queue || !set->queue->HasEntries()) continue;
      queued = true;
      waiting = waiting || !set->queue->OneNewSubmission();
    }
    if (waiting) {
      std::this_thread::sleep_until(last_cycle + cycle);
      signal_->Wait(std::chrono::microseconds(0));  // clears the notifications the sleep absorbed
    } else if (queued) {
      signal_->Wait(std::chrono::microseconds(0));
    } else {
      signal_->Wait(sets.size() > 1 ? cycle : std::max(cycle, kIdleWait));
    }
    last_cycle = std::chrono::steady_clock::now();
    timeline_.Cycle();
    ResponseList list;
    if (!Cycle(*sets[0], shutdown_requested_ || !loop_status_.ok(), &list) || WorkerFailed()) break;
    if (list.shutdown) {
      shutdown_rank_ = list.shutdown_rank;
      break;
    }
    // The global cycle may have added or removed sets: every member sees the same table now.
    for (const auto& set : sets_.All()) {
      ResponseList l;
      if (set->id == 0 || !set->included() || set->failed) continue;
      if (!Cycle(*set, false, &l)) {
        // This set's communicator is broken: fail its work and stop cycling it; the next global cycle carries
        // a shutdown so the ranks outside the set leave together instead of waiting in the global negotiation.
        set->failed = true;
        for (auto& e : set->queue->Close(loop_status_)) e.callback(loop_status_);
      }
    }
    if (WorkerFailed()) break;
  }
  loop_done_ = true;
  FailAll(CheckReady());
}

bool Runtime::Cycle(ProcessSet& set, bool shutdown, ResponseList* list) {
  Status s = set.controller->ComputeResponseList(shutdown, list);
  if (!s.ok()) s = set.backend->Explain(s);
  if (!s.ok()) {
    if (s.code() == StatusCode::WORKERS_FAILED) return !OnWorkerFailure(s);
    TFR_LOG(TFR_ERROR, "negotiation failed" << set.label().Where() << ", stopping: " << s.message());
    loop_status_ = s;
    // Under ULFM peers may have finished this negotiation and wait in the next: revoking lets them fail at once.
    if (set.backend->FaultTolerant()) RevokeAll();
    return false;
  }
  if (list->tuned_fusion_threshold >= 0) {  // rank 0's settings (at start, or autotune): all switch this cycle
    fusion_threshold_ = list->tuned_fusion_threshold;
    cycle_time_ms_ = list->tuned_cycle_time_ms;
    if (list->tuned_hierarchical >= 0) hierarchical_ = list->tuned_hierarchical;
    TFR_LOG(TFR_DEBUG, "settings from rank 0: fusion " << fusion_threshold_ << " B, cycle " << cycle_time_ms_ << " ms");
  }
  int64_t bytes = 0;
  const double decided = Now();
  cycle_oldest_ = decided;
  for (const Response& r : PlanFusion(std::move(list->responses), fusion_threshold_)) {
    if (autotuner_) bytes += PayloadBytes(r);  // only the autotuner reads it
    Perform(set, r);
  }
  monitor_.OnWait(cycle_oldest_, decided);
  if (autotuner_ && set.id == 0) {
    autotuner_->Record(bytes, Now());
    TunedParams next;
    if (autotuner_->TakeProposal(&next)) set.controller->ProposeParameters(next);
  }
  return true;
}

void Runtime::Perform(ProcessSet& set, const Response& response) {
  std::vector<TensorEntry> taken(response.names.size());
  std::vector<TensorEntry*> entries(response.names.size(), nullptr);
  for (size_t i = 0; i < response.names.size(); ++i)
    if (set.queue->Take(response.names[i], &taken[i])) {
      entries[i] = &taken[i];
      cycle_oldest_ = std::min(cycle_oldest_, taken[i].submitted);
    }
  Status status;
  if (response.kind == Response::ERROR) {
    status = Status(static_cast<StatusCode>(response.error_code), response.error);
  } else if (!response.devices.empty()) {
    if (set.id != 0) {
      status = Status::InvalidArgument("tfring: GPU collectives run on the global process set only");
    } else if (Staged(response)) {
      status = ExecuteOnHost(set, response, entries, true);
    } else {
      const int64_t bytes = LocalBytes(response.op, entries);
      if (PerformOnGpu(response, &taken, &status)) {
        // Names and bytes (steps are inferred from the names); the transfer runs later on the NCCL stream.
        monitor_.OnExecuted(response.names, response.op, bytes, static_cast<int>(set.ranks.size()), 0);
        return;
      }
    }
  } else if (response.op == OpType::JOIN) {
    const int last = response.last_joined_rank;  // a set rank: report the global one, as every rank number
    // Joined ranks skipped the others' unnamed collectives: every member restarts the set's counts here.
    UnnamedCounts::Get().RestartSet(set.id);
    for (auto* e : entries)
      if (e && e->join_result) *e->join_result = last >= 0 && set.id != 0 ? set.ranks[last] : last;
  } else if (response.op == OpType::PROCESS_SET) {
    int id = -1;
    status = ApplyProcessSetChange(response, &id);
    for (auto* e : entries)
      if (e && e->join_result) *e->join_result = id;
  } else {
    status = ExecuteOnHost(set, response, entries, false);
  }
  if (!status.ok()) TFR_LOG(TFR_DEBUG, "collective failed: " << status.message());
  if (status.code() == StatusCode::WORKERS_FAILED) OnWorkerFailure(status);
  for (size_t i = 0; i < entries.size(); ++i)
    TFR_LOG(TFR_TRACE, "done " << response.names[i] << (entries[i] ? "" : " (no local entry)"));
  for (auto* e : entries)
    if (e) e->callback(status);
}

bool Runtime::OnWorkerFailure(const Status& status) {
  if (WorkerFailed()) return true;
  // Revoke every communicator first: a peer blocked in a ring step with a live neighbour, or in another set's
  // negotiation, returns at once instead of waiting for a message that will never come. The loop then ends and
  // every queued collective fails with WORKERS_FAILED (tfring.elastic rolls back and rebuilds on the survivors).
  TFR_LOG(TFR_WARNING, status.message() << "; revoking the communicators");
  RevokeAll();
  loop_status_ = status;
  return true;
}

void Runtime::RevokeAll() {
  for (auto& set : sets_.All())
    if (set->owned) set->owned->Revoke();
  backend_->Revoke();
}

bool Runtime::Staged(const Response& response) const {
  return staging_ && (!nccl_ || SharesDevice(response.devices, topology_.host_of));
}

Status Runtime::ExecuteOnHost(ProcessSet& set, const Response& response, const std::vector<TensorEntry*>& entries,
                              bool staged) {
  const double start = Now();
  Status status;
  {
    TimelineActivity activity(&timeline_, response.names, "EXECUTE");
    set.backend->SetHierarchical(hierarchical_);  // rank 0's setting, identical on every rank at this point
    status = staged ? PerformStaged(response, entries, *set.backend, *staging_, settings_.gpu_timeout_seconds, start)
                    : set.backend->Execute(response, entries);
    if (!status.ok()) status = set.backend->Explain(status);
  }
  if (status.ok())
    monitor_.OnExecuted(response.names, response.op, LocalBytes(response.op, entries),
                        static_cast<int>(set.ranks.size()), Now() - start);
  return status;
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
