// C entry points used by the Python package through ctypes (on the same shared library as the ops).
#pragma once
#include <cstdint>

extern "C" {
// Returns 0 on success; on failure writes a message into err (size err_len).
int tfring_init(int64_t comm_f, char* err, int err_len);
void tfring_shutdown();
int tfring_is_initialized();
// -1 when not initialized.
int tfring_rank();
int tfring_size();
int tfring_local_rank();
int tfring_local_size();
int tfring_cross_rank();
int tfring_cross_size();
int tfring_is_homogeneous();
int tfring_mpi_threads_supported();
int tfring_built(const char* what);
// The fusion threshold (bytes) and cycle time (ms) in force now (autotune changes them); -1 if not initialized.
int64_t tfring_fusion_threshold();
double tfring_cycle_time_ms();  // "mpi", "nccl", "gloo", "cuda"
const char* tfring_built_tf_version();
const char* tfring_knob_table();       // "name|type|default|doc\n" rows
// Rank 0 writes the timeline (other ranks: no-op). 0 on success, else writes the message into err.
int tfring_start_timeline(const char* path, int mark_cycles, char* err, int err_len);
void tfring_stop_timeline();
}
