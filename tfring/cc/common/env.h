// The knob table: every TFRING_* setting is one row (name, typed field, default, range, doc), NCCL_PARAM-style.
// HOROVOD_* names are aliases. One parser per type reads every row; an unparsable value is reported (log
// warning naming the variable and value) and the default used; an out-of-range value is clamped, also reported.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tfring {

enum class KnobType { INT, DOUBLE, BOOL, STRING, LEVEL };

// Settings read once at init from the environment, through the table.
struct Settings {
  int64_t fusion_threshold_bytes;
  double cycle_time_ms;
  int64_t cache_capacity;
  int64_t log_level;              // 0 trace, 1 debug, 2 info, 3 warning, 4 error
  double stall_check_seconds;     // 0 = stall inspector off
  double stall_shutdown_seconds;  // 0 = warn only, never fail
  bool stall_check_disable;
  std::string timeline_path;  // empty = no timeline
  bool timeline_mark_cycles;
  bool timeline_rank0_only;         // Horovod's form: rank 0's events only
  bool monitor;                     // per-rank accounting, rounds, metrics (0: off)
  bool straggler_check;             // rank 0 warns about a rank the others persistently wait for
  double straggler_min_ms;          // per-step cost below which no rank is named
  double straggler_warn_seconds;    // at most one warning per rank in this time
  int64_t straggler_steps;          // steps of evidence
  double monitor_interval_seconds;  // longest time between monitor rounds
  std::string metrics_file;         // rank 0's JSON lines (empty: none)
  int64_t mpi_max_count;            // elements per MPI call; larger collectives are chunked or refused
  int64_t allreduce_chunk_bytes;    // bytes per MPI allreduce call (0: one call up to mpi_max_count)
  bool nccl;                        // GPU tensors over NCCL (else staged through host memory; NCCL builds)
  double gpu_timeout_seconds;       // deadline of one GPU collective (NCCL builds)
  bool dynamic_process_sets;        // add/remove process sets after init
  int64_t output_cache_bytes;       // idle freed outputs kept mapped (TF binding)
  bool hierarchical_allreduce;      // rank 0's values apply on every rank
  bool hierarchical_allgather;
  bool autotune;
  std::string autotune_log;
  int64_t autotune_warmup_samples;
  double autotune_sample_seconds;
  int64_t autotune_samples_per_candidate;
  // Every row parsed; warnings (bad or clamped values) go through the log once per process.
  static Settings FromEnvironment();
};

struct Knob {
  const char* name;  // TFRING_ name; the HOROVOD_ alias swaps the prefix
  KnobType type;
  const char* default_value;
  double min, max;  // INT/DOUBLE/LEVEL: accepted range (clamped outside it)
  // At most one is set, matching `type` (LEVEL uses int_field); none: a row the Python side reads (Settings
  // skips it), listed here so that every TFRING_* variable is declared once.
  int64_t Settings::* int_field;
  double Settings::* double_field;
  bool Settings::* bool_field;
  std::string Settings::* string_field;
  const char* doc;
  // The launcher's view: tfringrun builds its flags, --help, config-file keys and range checks from these.
  const char* flag = "";       // "--cycle-time-ms"; a boolean's "--on|--off" pair, where the first flips the default
  const char* group = "";      // the tfringrun --help section it is listed in
  const char* flag_help = "";  // its --help line
  const char* config = "";     // horovodrun YAML key "section.key"; "!section.key": the key means the opposite
  double flag_scale = 1;       // knob units per flag unit (fusion threshold: MB on the command line, bytes here)

  // This row with a launcher flag (and, for horovodrun's YAML layout, its config-file key).
  Knob Flag(const char* spelling, const char* section, const char* help, const char* yaml = "", double scale = 1) const;
  bool read_by_core() const { return int_field || double_field || bool_field || string_field; }
};

const std::vector<Knob>& KnobTable();

// Raw lookup: TFRING_<suffix>, else HOROVOD_<suffix>, else the table default.
std::string KnobValue(const std::string& tfring_name);

// Parses `raw` as `knob`'s type into `out` (clamped to its range). Returns "" when it was used unchanged, else
// the warning to report (the value was unparsable and the default was stored, or it was clamped).
std::string ParseKnob(const Knob& knob, const std::string& raw, Settings* out);

}  // namespace tfring
