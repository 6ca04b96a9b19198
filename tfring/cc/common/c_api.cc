#include "c_api.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "env.h"
#include "labels.h"
#include "names.h"
#include "ops/mpi/census.h"
#include "runtime.h"
#include "status.h"
#include "types.h"

using tfring::Runtime;

extern "C" {

static int Report(const tfring::Status& s, char* err, int err_len) {
  if (s.ok()) return 0;
  if (err && err_len > 0) {
    std::strncpy(err, s.message().c_str(), err_len - 1);
    err[err_len - 1] = '\0';
  }
  return 1;
}

int tfring_init(int64_t comm_f, char* err, int err_len) { return Report(Runtime::Get().Init(comm_f), err, err_len); }

int tfring_init_with_sets(int64_t comm_f, const int* sets, const int* set_sizes, int num_sets, char* err, int err_len) {
  std::vector<std::vector<int>> static_sets;
  for (int i = 0, off = 0; i < num_sets; off += set_sizes[i], ++i)
    static_sets.emplace_back(sets + off, sets + off + set_sizes[i]);
  return Report(Runtime::Get().Init(comm_f, static_sets), err, err_len);
}

int tfring_process_set_topology(int id, int* size, int* rank, int* local_size, int* local_rank, int* included) {
  tfring::Topology t;
  bool in = false;
  if (!Runtime::Get().SetTopology(id, &t, &in)) return -1;
  *size = t.size, *rank = t.rank, *local_size = t.local_size, *local_rank = t.local_rank, *included = in;
  return 0;
}

int tfring_process_sets(int* ids, int* sizes, int cap, int* ranks, int cap_ranks) {
  if (!Runtime::Get().initialized()) return 0;
  auto sets = Runtime::Get().ProcessSets();
  int off = 0;
  for (size_t i = 0; i < sets.size() && static_cast<int>(i) < cap; ++i) {
    ids[i] = sets[i].first;
    sizes[i] = static_cast<int>(sets[i].second.size());
    for (int r : sets[i].second)
      if (off < cap_ranks) ranks[off++] = r;
  }
  return static_cast<int>(sets.size());
}

int tfring_change_process_set(const int* ranks, int n, int remove_id, int* id, char* err, int err_len) {
  if (!Runtime::Get().initialized())
    return Report(tfring::Status::PreconditionError("tfring has not been initialized; call tfring.init() first"), err,
                  err_len);
  std::vector<int> r(ranks, ranks + n);
  return Report(Runtime::Get().ChangeProcessSet(r, remove_id, id), err, err_len);
}

int tfring_start_timeline(const char* path, int mark_cycles, char* err, int err_len) {
  if (!Runtime::Get().initialized())
    return Report(tfring::Status::PreconditionError("tfring.start_timeline: call tfring.init() first"), err, err_len);
  return Report(Runtime::Get().StartTimeline(path ? path : "", mark_cycles != 0), err, err_len);
}

void tfring_stop_timeline() { Runtime::Get().StopTimeline(); }

void tfring_shutdown() { Runtime::Get().Shutdown(); }
int tfring_is_initialized() { return Runtime::Get().initialized() ? 1 : 0; }

#define TFR_TOPOLOGY_GETTER(fn, field) \
  int fn() { return Runtime::Get().initialized() ? Runtime::Get().topology().field : -1; }
TFR_TOPOLOGY_GETTER(tfring_rank, rank)
TFR_TOPOLOGY_GETTER(tfring_size, size)
TFR_TOPOLOGY_GETTER(tfring_local_rank, local_rank)
TFR_TOPOLOGY_GETTER(tfring_local_size, local_size)
TFR_TOPOLOGY_GETTER(tfring_cross_rank, cross_rank)
TFR_TOPOLOGY_GETTER(tfring_cross_size, cross_size)
TFR_TOPOLOGY_GETTER(tfring_is_homogeneous, homogeneous)
TFR_TOPOLOGY_GETTER(tfring_mpi_threads_supported, threads_supported)
TFR_TOPOLOGY_GETTER(tfring_min_cpu_milli_per_rank, min_cpu_milli_per_rank)

int tfring_built(const char* what) {
  std::string w = what ? what : "";
  if (w == "mpi") return 1;
#ifdef TFRING_HAVE_NCCL
  if (w == "nccl" || w == "cuda") return 1;
#endif
  return 0;
}

int64_t tfring_fusion_threshold() {
  auto& rt = tfring::Runtime::Get();
  return rt.initialized() ? rt.tuned().fusion_threshold_bytes : -1;
}

double tfring_cycle_time_ms() {
  auto& rt = tfring::Runtime::Get();
  return rt.initialized() ? rt.tuned().cycle_time_ms : -1;
}

int tfring_dynamic_process_sets() {
  auto& rt = tfring::Runtime::Get();
  return rt.initialized() ? rt.settings().dynamic_process_sets : -1;
}

const char* tfring_knob_table() {
  static const std::string rows = [] {
    static const char* types[] = {"int", "double", "bool", "string", "level"};
    auto num = [](double v) {
      char b[32];
      std::snprintf(b, sizeof(b), "%.17g", v);
      return std::string(b);
    };
    std::string out;
    const std::string sep = "\x1f";  // the unit separator: no doc string holds it
    for (const auto& k : tfring::KnobTable())
      out += std::string(k.name) + sep + types[static_cast<int>(k.type)] + sep + k.default_value + sep + k.doc + sep +
             num(k.min) + sep + num(k.max) + sep + k.flag + sep + k.group + sep + k.flag_help + sep + k.config + sep +
             num(k.flag_scale) + sep + (k.read_by_core() ? "core" : "python") + "\n";
    return out;
  }();
  return rows.c_str();
}

const char* tfring_metrics() {
  thread_local std::string summary;  // the caller copies it before its thread calls again
  summary = Runtime::Get().monitor().Summary();
  return summary.c_str();
}

void tfring_mark_step() { Runtime::Get().monitor().MarkStep(); }

int tfring_unnamed_collective(const char* prefix, int process_set_id, const char* scope, char* out, int out_len) {
  const std::string p = prefix ? prefix : "";
  if (static_cast<int>(p.size()) + 32 > out_len) return -1;  // ".noname." and 20 digits fit in 32
  const std::string name = tfring::UnnamedCounts::Get().Next(p, process_set_id, scope ? scope : "");
  std::memcpy(out, name.c_str(), name.size() + 1);
  return static_cast<int>(name.size());
}

void tfring_release_name_scope(const char* scope) {
  if (scope) tfring::UnnamedCounts::Get().ReleaseScope(scope);
}

int tfring_tensor_names(const char* base, int count, char* out, int out_len) {
  std::string joined;
  for (const auto& n : tfring::TensorNames(base ? base : "", count)) joined += (joined.empty() ? "" : "\n") + n;
  if (static_cast<int>(joined.size()) >= out_len) return -1;
  std::memcpy(out, joined.c_str(), joined.size() + 1);
  return static_cast<int>(joined.size());
}

void tfring_set_silent_hook(int (*hook)(int rank, const char* host, int pid, int n, const int* ranks,
                                        const char* const* hosts, const int* pids, const int* alone, int ask)) {
  tfring::SetSilentHook(hook);
}

void tfring_set_tensor_label(const char* name, const char* label) {
  if (name && label) tfring::SetTensorLabel(name, label);
}

int tfring_reduce_op(const char* name) {
  std::string n = name ? name : "";
  for (int v = 0; v <= static_cast<int>(tfring::ReduceOp::PRODUCT); ++v)
    if (n == tfring::ReduceOpName(static_cast<tfring::ReduceOp>(v))) return v;
  return -1;
}

int tfring_status_code(const char* name) {
  std::string n = name ? name : "";
  for (int v = 0; v <= static_cast<int>(tfring::StatusCode::WORKERS_FAILED); ++v)
    if (n == tfring::StatusCodeName(static_cast<tfring::StatusCode>(v))) return v;
  return -1;
}

const char* tfring_workers_failed_mark() { return tfring::kWorkersFailedMark; }

}  // extern "C"
