#include "env.h"

#include <algorithm>
#include <cstdlib>



namespace tfring {

const std::vector<Knob>& KnobTable() {
  static const std::vector<Knob> table = {
      {"TFRING_FUSION_THRESHOLD", KnobType::INT, "8388608",
       "Bytes of small allreduces packed into one fusion buffer per collective call (0 disables fusion)."},
      {"TFRING_CYCLE_TIME", KnobType::DOUBLE, "1",
       "Milliseconds between negotiation cycles while collectives wait for other ranks (a burst of collectives "
       "shares cycles); a collective reaching an empty queue starts a cycle at once."},
      {"TFRING_CACHE_CAPACITY", KnobType::INT, "1024",
       "Responses kept for the steady-state bit-vector fast path (0 disables the cache)."},
      {"TFRING_LOG_LEVEL", KnobType::STRING, "warning", "trace, debug, info, warning or error."},
      {"TFRING_STALL_CHECK_TIME_SECONDS", KnobType::DOUBLE, "60",
       "Seconds a tensor may wait for missing ranks before every rank logs which ranks and tensors stall."},
      {"TFRING_STALL_SHUTDOWN_TIME_SECONDS", KnobType::DOUBLE, "1800",
       "Seconds after which a stalled collective fails on every rank (tf.errors.DeadlineExceededError naming the "
       "tensor, process set and missing ranks) instead of waiting forever; 0 waits forever. 30 min, as "
       "torch.distributed's default timeout: longer than rank-0-only evaluation or checkpointing of large models."},
      {"TFRING_STALL_CHECK_DISABLE", KnobType::BOOL, "0", "1 turns the stall inspector off."},
      {"TFRING_TIMELINE", KnobType::STRING, "",
       "Path of a Chrome-trace JSON timeline written by rank 0 (open it in Perfetto or chrome://tracing)."},
      {"TFRING_TIMELINE_MARK_CYCLES", KnobType::BOOL, "0", "1 adds a mark for every background-thread cycle."},
      {"TFRING_MPI_MAX_COUNT", KnobType::INT, "2147483647",
       "Largest count per MPI call (MPI counts are int). Allreduce/broadcast are chunked to it; allgather, "
       "alltoall and reducescatter beyond it fail clearly. Lowering it only serves to test those paths."},
      {"TFRING_GPU_TIMEOUT_SECONDS", KnobType::DOUBLE, "600",
       "NCCL builds: seconds one GPU collective may run before its communicator is aborted and the op fails "
       "(0: no deadline)."},
      {"TFRING_DYNAMIC_PROCESS_SETS", KnobType::BOOL, "0",
       "1 allows add_process_set/remove_process_set after init() (every rank must set it alike)."},
      {"TFRING_OUTPUT_CACHE_BYTES", KnobType::INT, "268435456",
       "Idle bytes of freed collective outputs (>= 256 KiB each, CPU) kept mapped for reuse by later outputs of "
       "the same size, so they do not page-fault on first touch (0 disables; read once per process)."},
      {"TFRING_AUTOTUNE", KnobType::BOOL, "0",
       "1: rank 0 tunes the fusion threshold and cycle time online from measured collective throughput and "
       "ships each setting to all ranks; it ends with the best one."},
      {"TFRING_AUTOTUNE_LOG", KnobType::STRING, "", "CSV file where rank 0 logs every autotune sample and decision."},
      {"TFRING_AUTOTUNE_WARMUP_SAMPLES", KnobType::INT, "1", "Autotune samples discarded after each switch."},
      {"TFRING_AUTOTUNE_SAMPLE_SECONDS", KnobType::DOUBLE, "1", "Seconds of collective activity per sample."},
      {"TFRING_AUTOTUNE_SAMPLES_PER_CANDIDATE", KnobType::INT, "3",
       "Samples per candidate setting; its score is their median."},
  };
  return table;
}

std::string KnobValue(const std::string& name) {
  if (const char* v = std::getenv(name.c_str())) return v;
  std::string alias = "HOROVOD_" + name.substr(std::string("TFRING_").size());
  if (const char* v = std::getenv(alias.c_str())) return v;
  for (const auto& k : KnobTable())
    if (name == k.name) return k.default_value;
  return "";
}

static int ParseLogLevel(const std::string& v) {
  static const char* names[] = {"trace", "debug", "info", "warning", "error"};
  for (int i = 0; i < 5; ++i)
    if (v == names[i]) return i;
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (end && *end == '\0' && !v.empty()) return static_cast<int>(n);
  return 3;
}

Settings Settings::FromEnvironment() {
  Settings s;
  s.fusion_threshold_bytes = std::atoll(KnobValue("TFRING_FUSION_THRESHOLD").c_str());
  s.cycle_time_ms = std::atof(KnobValue("TFRING_CYCLE_TIME").c_str());
  s.cache_capacity = std::atoll(KnobValue("TFRING_CACHE_CAPACITY").c_str());
  s.log_level = ParseLogLevel(KnobValue("TFRING_LOG_LEVEL"));
  s.stall_check_seconds = std::atof(KnobValue("TFRING_STALL_CHECK_TIME_SECONDS").c_str());
  s.stall_shutdown_seconds = std::atof(KnobValue("TFRING_STALL_SHUTDOWN_TIME_SECONDS").c_str());
  s.timeline_path = KnobValue("TFRING_TIMELINE");
  const std::string marks = KnobValue("TFRING_TIMELINE_MARK_CYCLES");
  s.timeline_mark_cycles = marks == "1" || marks == "true" || marks == "True";
  const std::string disable = KnobValue("TFRING_STALL_CHECK_DISABLE");
  if (disable == "1" || disable == "true" || disable == "True") s.stall_check_seconds = s.stall_shutdown_seconds = 0;
  s.mpi_max_count = std::atoll(KnobValue("TFRING_MPI_MAX_COUNT").c_str());
  const std::string dyn = KnobValue("TFRING_DYNAMIC_PROCESS_SETS");
  s.dynamic_process_sets = dyn == "1" || dyn == "true" || dyn == "True";
  const std::string tune = KnobValue("TFRING_AUTOTUNE");
  s.autotune = tune == "1" || tune == "true" || tune == "True";
  s.autotune_log = KnobValue("TFRING_AUTOTUNE_LOG");
  s.autotune_warmup_samples = std::max(0, std::atoi(KnobValue("TFRING_AUTOTUNE_WARMUP_SAMPLES").c_str()));
  s.autotune_sample_seconds = std::max(0.01, std::atof(KnobValue("TFRING_AUTOTUNE_SAMPLE_SECONDS").c_str()));
  s.autotune_samples_per_candidate = std::max(1, std::atoi(KnobValue("TFRING_AUTOTUNE_SAMPLES_PER_CANDIDATE").c_str()));
  s.gpu_timeout_seconds = std::atof(KnobValue("TFRING_GPU_TIMEOUT_SECONDS").c_str());
  if (s.mpi_max_count < 1 || s.mpi_max_count > 2147483647LL) s.mpi_max_count = 2147483647LL;
  if (s.fusion_threshold_bytes < 0) s.fusion_threshold_bytes = 0;
  if (s.cycle_time_ms < 0) s.cycle_time_ms = 0;
  if (s.cache_capacity < 0) s.cache_capacity = 0;
  return s;
}

}  // namespace tfring
