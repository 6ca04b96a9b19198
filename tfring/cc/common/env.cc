#include "env.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "logging.h"

namespace tfring {

namespace {

constexpr double kNoMax = std::numeric_limits<double>::max();

Knob Int(const char* name, const char* def, double min, double max, int64_t Settings::* f, const char* doc) {
  return {name, KnobType::INT, def, min, max, f, nullptr, nullptr, nullptr, doc};
}
Knob Double(const char* name, const char* def, double min, double max, double Settings::* f, const char* doc) {
  return {name, KnobType::DOUBLE, def, min, max, nullptr, f, nullptr, nullptr, doc};
}
Knob Bool(const char* name, const char* def, bool Settings::* f, const char* doc) {
  return {name, KnobType::BOOL, def, 0, 1, nullptr, nullptr, f, nullptr, doc};
}
Knob String(const char* name, const char* def, std::string Settings::* f, const char* doc) {
  return {name, KnobType::STRING, def, 0, 0, nullptr, nullptr, nullptr, f, doc};
}
// A variable read by tfring's Python side only (the launcher, the Spark driver, the TF binding): no Settings field.
Knob Python(const char* name, KnobType type, const char* def, const char* doc) {
  return {name, type, def, 0, kNoMax, nullptr, nullptr, nullptr, nullptr, doc};
}

constexpr const char* kTunable = "tunable parameter arguments";
constexpr const char* kAutotune = "autotune arguments";
constexpr const char* kTimeline = "timeline arguments";
constexpr const char* kMonitoring = "monitoring arguments";
constexpr const char* kStall = "stall check arguments";
constexpr const char* kLogging = "logging arguments";

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Whole-string numeric parses: "8MB" or "" are errors, not 8 or 0.
bool ParseInt(const std::string& s, int64_t* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long n = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *v = n;
  return true;
}

bool ParseDouble(const std::string& s, double* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(d)) return false;
  *v = d;
  return true;
}

bool ParseBool(const std::string& s, bool* v) {
  const std::string l = Lower(s);
  if (l == "1" || l == "true" || l == "yes" || l == "on") return *v = true, true;
  if (l == "0" || l == "false" || l == "no" || l == "off" || l.empty()) return *v = false, true;
  return false;
}

bool ParseLevel(const std::string& s, int64_t* v) {
  static const char* names[] = {"trace", "debug", "info", "warning", "error"};
  for (int i = 0; i < 5; ++i)
    if (Lower(s) == names[i]) return *v = i, true;
  return ParseInt(s, v);
}

}  // namespace

Knob Knob::Flag(const char* spelling, const char* section, const char* help, const char* yaml, double scale) const {
  Knob k = *this;
  k.flag = spelling, k.group = section, k.flag_help = help, k.config = yaml, k.flag_scale = scale;
  return k;
}

const std::vector<Knob>& KnobTable() {
  static const std::vector<Knob> table = {
      Int("TFRING_FUSION_THRESHOLD", "8388608", 0, 1e15, &Settings::fusion_threshold_bytes,
          "Bytes of small allreduces packed into one fusion buffer per collective call (0 disables fusion); 8 MiB "
          "measured faster than Horovod's 64 MiB here (docs/benchmarks.md).")
          .Flag("--fusion-threshold-mb", kTunable, "fusion buffer size in MB (0 disables fusion)",
                "params.fusion_threshold_mb", 1 << 20),
      Double("TFRING_CYCLE_TIME", "1", 0, 1e6, &Settings::cycle_time_ms,
             "Milliseconds between negotiation cycles while collectives wait for other ranks (a burst of "
             "collectives shares cycles); a collective reaching an empty queue starts a cycle at once, and a rank with "
             "nothing outstanding negotiates only when work arrives, or every 100 ms.")
          .Flag("--cycle-time-ms", kTunable, "milliseconds between negotiation cycles", "params.cycle_time_ms"),
      Int("TFRING_CACHE_CAPACITY", "1024", 0, 1e9, &Settings::cache_capacity,
          "Responses kept for the steady-state bit-vector fast path (0 disables the cache).")
          .Flag("--cache-capacity", kTunable, "response cache entries (0 disables the cache)", "params.cache_capacity"),
      Knob{"TFRING_LOG_LEVEL", KnobType::LEVEL, "warning", 0, 4, &Settings::log_level, nullptr, nullptr, nullptr,
           "trace, debug, info, warning or error (or 0-4)."}
          .Flag("--log-level", kLogging, "tfring's backend log level", "logging.level"),
      Double("TFRING_STALL_CHECK_TIME_SECONDS", "60", 0, kNoMax, &Settings::stall_check_seconds,
             "Seconds a tensor may wait for missing ranks before every rank logs which ranks and tensors stall "
             "(and, when the negotiation itself waits that long, which ranks stopped responding).")
          .Flag("--stall-check-warning-time-seconds", kStall, "seconds until a stall warning",
                "stall_check.warning_time_seconds"),
      Double("TFRING_STALL_SHUTDOWN_TIME_SECONDS", "1800", 0, kNoMax, &Settings::stall_shutdown_seconds,
             "Seconds after which a stalled collective fails on every rank (tf.errors.DeadlineExceededError naming "
             "the tensor, process set and missing ranks) instead of waiting forever; also the deadline for ranks "
             "that stop responding (the job then ends); 0 waits forever. 30 min, as "
             "torch.distributed's default timeout: longer than rank-0-only evaluation or checkpointing of large "
             "models.")
          .Flag("--stall-check-shutdown-time-seconds", kStall, "seconds until a stall fails the job",
                "stall_check.shutdown_time_seconds"),
      Bool("TFRING_STALL_CHECK_DISABLE", "0", &Settings::stall_check_disable,
           "1 turns the stall inspector off (no warnings, no shutdown deadline).")
          .Flag("--no-stall-check|--stall-check", kStall, "disable the stall inspector", "!stall_check.enabled"),
      String("TFRING_TIMELINE", "", &Settings::timeline_path,
             "Path of a Chrome-trace JSON timeline written by rank 0 with a process per rank, clocks aligned (open "
             "it in Perfetto or chrome://tracing; docs/observability.md). Also hvd.start_timeline(path) / "
             "stop_timeline().")
          .Flag("--timeline-filename", kTimeline, "Chrome-trace JSON timeline of every rank, written by rank 0",
                "timeline.filename"),
      Bool("TFRING_TIMELINE_MARK_CYCLES", "0", &Settings::timeline_mark_cycles,
           "1 adds a mark for every background-thread cycle.")
          .Flag("--timeline-mark-cycles|--no-timeline-mark-cycles", kTimeline, "mark cycles", "timeline.mark_cycles"),
      Bool("TFRING_TIMELINE_RANK0_ONLY", "0", &Settings::timeline_rank0_only,
           "1: the timeline holds rank 0's events only (Horovod's form); other ranks record nothing.")
          .Flag("--timeline-rank0-only|--no-timeline-rank0-only", kTimeline,
                "record rank 0's events only (Horovod's timeline)"),
      Bool("TFRING_MONITOR", "1", &Settings::monitor,
           "0 turns the monitor off: no per-rank accounting, no straggler check, no metrics (tfring.metrics() "
           "returns None); the timeline still gets every rank's events. On: each rank's waiting, transfer time, "
           "bytes and bus bandwidth, gathered at rank 0 every 4 steps or TFRING_MONITOR_INTERVAL_SECONDS; "
           "hvd.metrics() on every rank."),
      Bool("TFRING_STRAGGLER_CHECK", "1", &Settings::straggler_check,
           "1: rank 0 logs `tfring: rank R is a straggler: the others waited N ms per step for it over the last S "
           "steps` when R arrived last in each of the last 3 rounds by at least TFRING_STRAGGLER_MIN_MS and 10 % of "
           "a step, over TFRING_STRAGGLER_STEPS steps (one line per rank per TFRING_STRAGGLER_WARN_SECONDS).")
          .Flag("--no-straggler-check|--straggler-check", kMonitoring,
                "do not warn about stragglers (the metrics still name them)"),
      Double("TFRING_STRAGGLER_MIN_MS", "5", 0, kNoMax, &Settings::straggler_min_ms,
             "Milliseconds per step the others must wait for a rank (and at least 10 % of a step) before it is "
             "named a straggler."),
      Double("TFRING_STRAGGLER_WARN_SECONDS", "60", 0, kNoMax, &Settings::straggler_warn_seconds,
             "Seconds between two straggler warnings about the same rank."),
      Int("TFRING_STRAGGLER_STEPS", "20", 1, 1e9, &Settings::straggler_steps,
          "Steps of evidence behind a straggler verdict (it must also be last in each of the last 3 rounds)."),
      Double("TFRING_MONITOR_INTERVAL_SECONDS", "1", 0.01, kNoMax, &Settings::monitor_interval_seconds,
             "Longest time between two monitor rounds (per-rank statistics gathered at rank 0; also every 4 "
             "steps), and between two lines of the metrics file."),
      String("TFRING_METRICS_FILE", "", &Settings::metrics_file,
             "Path where rank 0 writes a JSON line of every rank's metrics (wait, transfer, bytes, bus bandwidth, "
             "straggler) at most once per TFRING_MONITOR_INTERVAL_SECONDS.")
          .Flag("--metrics-file", kMonitoring,
                "rank 0 writes every rank's metrics there as JSON lines (wait, transfer, bytes, bus bandwidth, "
                "straggler), at most once per TFRING_MONITOR_INTERVAL_SECONDS"),
      Python("TFRING_METRICS_PORT", KnobType::INT, "0",
             "Port of rank 0's Prometheus endpoint (http://ADDRESS:PORT/metrics, text format): every rank's wait, "
             "transfer time, bytes, collectives and bus bandwidth, the step time, slowest rank and straggler, and the "
             "elastic events, read at each scrape; answered only with the bearer token of "
             "TFRING_METRICS_TOKEN_FILE. 0: no endpoint (docs/observability.md).")
          .Flag("--metrics-port", kMonitoring,
                "rank 0 serves every rank's metrics for Prometheus on this port (bearer token: "
                "--metrics-token-file)"),
      Python("TFRING_METRICS_TOKEN_FILE", KnobType::STRING, "~/.tfring/metrics-token",
             "File holding the metrics endpoint's bearer token (a scraper's bearer_token_file); when it does not "
             "exist, a new random token is written there (mode 0600) by tfringrun or, without it, by rank 0.")
          .Flag("--metrics-token-file", kMonitoring,
                "the metrics endpoint's bearer token (written, mode 0600, when "
                "the file does not exist)"),
      Python("TFRING_METRICS_ADDRESS", KnobType::STRING, "",
             "Address rank 0's metrics endpoint binds to (never every interface); default: 127.0.0.1 when every "
             "rank is on one host, else the address rank 0's host name resolves to.")
          .Flag("--metrics-address", kMonitoring, "the address the metrics endpoint binds to"),
      Int("TFRING_MPI_MAX_COUNT", "2147483647", 1, 2147483647, &Settings::mpi_max_count,
          "Largest count per MPI call (MPI counts are int). Allreduce/broadcast are chunked to it; allgather, "
          "alltoall and reducescatter beyond it fail clearly. Lowering it only serves to test those paths. "
          "Rank 0's value applies to every rank."),
      Int("TFRING_ALLREDUCE_CHUNK_BYTES", "16777216", 0, 1e15, &Settings::allreduce_chunk_bytes,
          "Bytes per MPI allreduce call on the CPU: a larger tensor or fusion buffer is reduced in chunks of this "
          "size (Open MPI maps and page-faults a fresh temporary for each call over ~32 MiB: 2.3x slower at "
          "100 MB). 0: one call per buffer. Rank 0's value applies to every rank."),
      Double("TFRING_GPU_TIMEOUT_SECONDS", "600", 0, kNoMax, &Settings::gpu_timeout_seconds,
             "NCCL builds: seconds one GPU collective may run before its communicator is aborted and the op fails "
             "(0: no deadline)."),
      Bool("TFRING_NCCL", "1", &Settings::nccl,
           "NCCL builds: 0 runs GPU tensors' collectives over MPI through host memory, as when two ranks of a host "
           "share a GPU (NCCL refuses that; staged automatically). Rank 0's value applies to every rank."),
      Bool("TFRING_DYNAMIC_PROCESS_SETS", "0", &Settings::dynamic_process_sets,
           "1 allows add_process_set/remove_process_set after init() (every rank must set it alike)."),
      Int("TFRING_OUTPUT_CACHE_BYTES", "268435456", 0, 1e15, &Settings::output_cache_bytes,
          "Idle bytes of freed collective outputs (>= 256 KiB each, CPU) kept mapped for reuse by later outputs "
          "of the same size, so they do not page-fault on first touch (0 disables; read once per process)."),
      Bool("TFRING_HIERARCHICAL_ALLREDUCE", "0", &Settings::hierarchical_allreduce,
           "1: allreduce within each host first (shared memory), then across hosts among one rank per host (or "
           "per shard), then within the host again. Rank 0's value applies to every rank; no effect on one host "
           "(docs/scaling.md: when it pays).")
          .Flag("--hierarchical-allreduce|--no-hierarchical-allreduce", kTunable,
                "allreduce within each host, then across hosts|flat allreduce", "params.hierarchical_allreduce"),
      Bool("TFRING_HIERARCHICAL_ALLGATHER", "0", &Settings::hierarchical_allgather,
           "1: allgather within each host to its first rank, across hosts among those, then broadcast within the "
           "host. Rank 0's value applies to every rank; no effect on one host.")
          .Flag("--hierarchical-allgather|--no-hierarchical-allgather", kTunable,
                "allgather within each host, then across hosts|flat allgather", "params.hierarchical_allgather"),
      Bool("TFRING_AUTOTUNE", "0", &Settings::autotune,
           "1: rank 0 tunes the fusion threshold and cycle time online from measured collective throughput and "
           "ships each setting to all ranks (they switch at the same cycle); then hierarchical allreduce off/on when "
           "the job spans hosts and a host has several ranks; it ends with the best one (hvd.tunables() shows "
           "what is in force).")
          .Flag("--autotune|--no-autotune", kAutotune, "tune fusion threshold and cycle time online",
                "autotune.enabled"),
      String("TFRING_AUTOTUNE_LOG", "", &Settings::autotune_log,
             "CSV file where rank 0 logs every autotune sample and decision.")
          .Flag("--autotune-log-file", kAutotune, "CSV of every autotune sample and decision (rank 0)",
                "autotune.log_file"),
      Int("TFRING_AUTOTUNE_WARMUP_SAMPLES", "1", 0, 1e6, &Settings::autotune_warmup_samples,
          "Autotune samples discarded after each switch.")
          .Flag("--autotune-warmup-samples", kAutotune, "samples dropped after each switch", "autotune.warmup_samples"),
      Double("TFRING_AUTOTUNE_SAMPLE_SECONDS", "1", 0.01, 1e6, &Settings::autotune_sample_seconds,
             "Seconds of collective activity per sample.")
          .Flag("--autotune-sample-seconds", kAutotune, "tfring: seconds of collective activity per sample",
                "autotune.sample_seconds"),
      Int("TFRING_AUTOTUNE_SAMPLES_PER_CANDIDATE", "3", 1, 1e6, &Settings::autotune_samples_per_candidate,
          "Samples per candidate setting; its score is their median.")
          .Flag("--autotune-samples-per-candidate", kAutotune, "tfring: samples per candidate (median)",
                "autotune.samples_per_candidate"),
      Python("TFRING_OVERLAP_GRADIENTS", KnobType::STRING, "auto",
             "TF DistributedGradientTape/DistributedOptimizer in a graph: 1 = one allreduce per gradient as backprop "
             "produces it (Horovod's way), 0 = one grouped allreduce after backprop, auto = 1 with a GPU (NCCL) "
             "build or with at least 2 logical CPUs per rank on every host (agreed by every rank at init), else 0 "
             "(with one CPU per rank the overlap competes with backprop: docs/benchmarks.md). In elastic jobs auto "
             "= 1. torch's DistributedOptimizer always overlaps."),
      Python("TFRING_START_TIMEOUT", KnobType::INT, "",
             "Launcher: seconds every rank has to start (--start-timeout wins); unset: 30 when the job has remote "
             "hosts (horovodrun's default: an unreachable host would hang mpirun), else no deadline; 0: none."),
      Python("TFRING_ELASTIC_TIMEOUT", KnobType::INT, "600",
             "Elastic jobs: seconds to wait for the fewest ranks (--min-np, min_num_proc) at the start or after a "
             "failure (--elastic-timeout / elastic_timeout wins; the launcher passes its value to the ranks)."),
      Python("TFRING_COMMIT_DIR", KnobType::STRING, "",
             "Directory where every elastic state commit is also written, in the background (each host's first rank "
             "writes commit.<host>.pkl atomically); a job started again with the same directory resumes from the "
             "newest complete commit there (--commit-dir wins). Use an empty directory for a fresh start."),
      Python("TFRING_SPARK_START_TIMEOUT", KnobType::INT, "600",
             "Spark/Ray jobs: seconds for every task to start and register (the start_timeout argument wins)."),
      Python("TFRING_SPARK_DRIVER_HOST", KnobType::STRING, "",
             "Spark jobs: the address tasks reach the driver's services at (default: spark.driver.host)."),
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

std::string ParseKnob(const Knob& k, const std::string& raw, Settings* out) {
  static const char* expected[] = {"an integer", "a number", "a boolean (1/0/true/false)", "", "a log level"};
  std::string warning;
  if (!k.read_by_core()) return warning;  // the Python side parses its own rows
  auto bad = [&] {
    warning = std::string("ignoring ") + k.name + "=" + raw + " (expected " + expected[static_cast<int>(k.type)] +
              "); using the default " + (*k.default_value ? k.default_value : "''");
  };
  auto clamp = [&](double v) {
    double c = std::min(std::max(v, k.min), k.max);
    if (c != v)
      warning = std::string(k.name) + "=" + raw + " is outside [" + std::to_string(k.min) + ", " +
                std::to_string(k.max) + "]; using " + std::to_string(c);
    return c;
  };
  switch (k.type) {
    case KnobType::INT:
    case KnobType::LEVEL: {
      int64_t v = 0;
      auto parse = k.type == KnobType::INT ? ParseInt : ParseLevel;
      if (!parse(raw, &v)) bad(), parse(k.default_value, &v);
      out->*k.int_field = static_cast<int64_t>(clamp(static_cast<double>(v)));
      break;
    }
    case KnobType::DOUBLE: {
      double v = 0;
      if (!ParseDouble(raw, &v)) bad(), ParseDouble(k.default_value, &v);
      out->*k.double_field = clamp(v);
      break;
    }
    case KnobType::BOOL: {
      bool v = false;
      if (!ParseBool(raw, &v)) bad(), ParseBool(k.default_value, &v);
      out->*k.bool_field = v;
      break;
    }
    case KnobType::STRING:
      out->*k.string_field = raw;
      break;
  }
  return warning;
}

Settings Settings::FromEnvironment() {
  Settings s{};
  std::vector<std::string> warnings;
  for (const auto& k : KnobTable()) {
    if (!k.read_by_core()) continue;
    std::string w = ParseKnob(k, KnobValue(k.name), &s);
    if (!w.empty()) warnings.push_back(w);
  }
  if (s.stall_check_disable) s.stall_check_seconds = s.stall_shutdown_seconds = 0;
  // Reported once per process, whichever of the runtime and the TF binding reads the table first.
  static std::atomic<bool> reported{false};
  if (!reported.exchange(true)) {
    for (const auto& w : warnings) TFR_LOG(TFR_WARNING, w);
  }
  return s;
}

}  // namespace tfring
