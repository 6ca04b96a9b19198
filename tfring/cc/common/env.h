// The knob table: every TFRING_* setting is one row (name, type, default, doc). HOROVOD_* names are aliases.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tfring {

enum class KnobType { INT, DOUBLE, BOOL, STRING };

struct Knob {
  const char* name;        // TFRING_ name; the HOROVOD_ alias swaps the prefix
  KnobType type;
  const char* default_value;
  const char* doc;
};

const std::vector<Knob>& KnobTable();

// Settings read once at init from the environment, through the table.
struct Settings {
  int64_t fusion_threshold_bytes;
  double cycle_time_ms;
  int64_t cache_capacity;
  int log_level;  // 0 trace, 1 debug, 2 info, 3 warning, 4 error
  double stall_check_seconds;     // 0 = stall inspector off
  double stall_shutdown_seconds;  // 0 = warn only, never fail
  std::string timeline_path;      // empty = no timeline
  bool timeline_mark_cycles;
  int64_t mpi_max_count;          // elements per MPI call; larger collectives are chunked or refused
  double gpu_timeout_seconds;     // deadline of one GPU collective (NCCL builds)
  bool autotune;
  std::string autotune_log;
  int autotune_warmup_samples;
  double autotune_sample_seconds;
  int autotune_samples_per_candidate;
  bool dynamic_process_sets;      // add/remove process sets after init
  static Settings FromEnvironment();
};

// Raw lookup: TFRING_<suffix>, else HOROVOD_<suffix>, else the table default.
std::string KnobValue(const std::string& tfring_name);

}  // namespace tfring
