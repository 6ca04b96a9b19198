// C entry points used by the Python package through ctypes (on the same shared library as the ops).
#pragma once
#include <cstdint>

extern "C" {
// Returns 0 on success; on failure writes a message into err (size err_len).
int tfring_init(int64_t comm_f, char* err, int err_len);
// sets: the ranks of every static process set back to back; set_sizes: how many ranks each has.
int tfring_init_with_sets(int64_t comm_f, const int* sets, const int* set_sizes, int num_sets, char* err, int err_len);
// Process sets. Topology of set `id` (-1 fields for non-members); returns 0, or -1 if no such set.
int tfring_process_set_topology(int id, int* size, int* rank, int* local_size, int* local_rank, int* included);
// Writes up to `cap` (id, size) pairs into ids/sizes and their ranks back to back into ranks (cap_ranks);
// returns the number of sets.
int tfring_process_sets(int* ids, int* sizes, int cap, int* ranks, int cap_ranks);
// Add (remove_id = -1, ranks) or remove (remove_id) a set; every rank alike. 0 on success with *id set (-1: a
// duplicate / unknown set), else writes the message into err.
int tfring_change_process_set(const int* ranks, int n, int remove_id, int* id, char* err, int err_len);
void tfring_shutdown();
int tfring_is_initialized();
// -1 when not initialized.
int tfring_rank();
int tfring_size();
int tfring_local_rank();
int tfring_local_size();
int tfring_min_cpu_milli_per_rank();  // job-wide fewest cores per rank x1000
int tfring_cross_rank();
int tfring_cross_size();
int tfring_is_homogeneous();
int tfring_mpi_threads_supported();
int tfring_built(const char* what);
// The fusion threshold (bytes) and cycle time (ms) in force now (autotune changes them); -1 if not initialized.
int64_t tfring_fusion_threshold();
double tfring_cycle_time_ms();  // "mpi", "nccl", "gloo", "cuda"
// Whether sets may be added or removed after init (TFRING_DYNAMIC_PROCESS_SETS as this rank parsed it); -1 if not
// initialized.
int tfring_dynamic_process_sets();
// One "\n"-ended row per knob, fields split by "\x1f": name, type, default, doc, min, max, flag, group,
// flag help, config key, flag scale, "core" or "python" (who reads it).
const char* tfring_knob_table();
// The value of the reduce op named `name` ("Average", "Sum", ...), -1 for no such op: the bindings read the
// values from here instead of typing them again.
int tfring_reduce_op(const char* name);
// The value of the status code named `name` ("INVALID_ARGUMENT", "WORKERS_FAILED", ...; status.h), -1 for none.
int tfring_status_code(const char* name);
// How every WORKERS_FAILED message starts (kWorkersFailedMark).
const char* tfring_workers_failed_mark();
// Rank 0 writes the timeline (other ranks: no-op). 0 on success, else writes the message into err.
int tfring_start_timeline(const char* path, int mark_cycles, char* err, int err_len);
void tfring_stop_timeline();
// The monitor's latest JSON summary (every rank's wait, transfer, bytes, bus bandwidth; the straggler), "" before
// the first round. Valid until this thread calls it again.
const char* tfring_metrics();
// A training step ended on this rank (rank 0's marks count the steps; without marks the monitor infers them).
void tfring_mark_step();
// Elastic jobs: who decides to go on without ranks that stopped responding (census.h, SilentHook): hook(this rank,
// its host, its pid, n, the silent ranks, their hosts, their pids, whether each is alone on its host, whether this
// rank asks for those to be ended) -> 1 go on, 0 end this rank, -1 no launcher; called on a thread of its own.
void tfring_set_silent_hook(int (*hook)(int rank, const char* host, int pid, int n, const int* ranks,
                                        const char* const* hosts, const int* pids, const int* alone, int ask));
// Shows `label` next to collective `name` in stall reports (e.g. the variable behind a gradient).
void tfring_set_tensor_label(const char* name, const char* label);
// Names (names.h, the one rule): the next unnamed collective of kind `prefix` on the set, counted in `scope` (""
// outside a traced function): "<prefix>.noname.<n>". Writes it into out (NUL-ended); returns its length, or -1
// when out_len is too small (nothing counted then).
int tfring_unnamed_collective(const char* prefix, int process_set_id, const char* scope, char* out, int out_len);
// A scope that will not name again (JAX: a freed trace): its counts are dropped.
void tfring_release_name_scope(const char* scope);
// The names a call of `count` tensors negotiates, from its base name, "\n"-joined into out; the length, or -1.
int tfring_tensor_names(const char* base, int count, char* out, int out_len);
}
