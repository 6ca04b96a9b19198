#include "declare_failed.h"

#include <dlfcn.h>

#include "mpi_context.h"  // mpi-ext.h: ULFM's error classes

#include <cstdlib>

namespace tfring {
namespace {

typedef int (*NamesFn)(void* group, MpiProcessName** names, size_t* count);
typedef void* (*ProcForNameFn)(MpiProcessName name);
typedef int (*ProcFailedFn)(void* proc, int status, bool forward);

template <typename F>
F Find(const char* symbol) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, symbol));
}

}  // namespace

std::vector<MpiProcessName> ProcessNames(MPI_Comm comm, const std::vector<int>& ranks) {
  std::vector<MpiProcessName> out;
  static const NamesFn names_of = Find<NamesFn>("ompi_group_to_proc_name_array");
  if (!names_of || comm == MPI_COMM_NULL) return out;
  MPI_Group group = MPI_GROUP_NULL;
  if (MPI_Comm_group(comm, &group) != MPI_SUCCESS) return out;
  MpiProcessName* all = nullptr;
  size_t count = 0;
  // MPI_Group is Open MPI's ompi_group_t*.
  if (names_of(reinterpret_cast<void*>(group), &all, &count) == 0 && all) {
    for (int r : ranks)
      if (r >= 0 && static_cast<size_t>(r) < count) out.push_back(all[r]);
    free(all);  // calloc'ed by Open MPI
  }
  MPI_Group_free(&group);
  return out;
}

bool DeclareFailed(const std::vector<MpiProcessName>& names) {
#ifdef TFRING_HAVE_ULFM_QUERIES
  static const ProcForNameFn proc_for = Find<ProcForNameFn>("ompi_proc_for_name");
  static const ProcFailedFn failed = Find<ProcFailedFn>("ompi_errhandler_proc_failed_internal");
  if (!proc_for || !failed) return false;
  bool all = true;
  for (const MpiProcessName& name : names) {  // each one, whatever became of the one before
    void* proc = proc_for(name);
    all = proc && failed(proc, MPIX_ERR_PROC_FAILED, false) == 0 && all;
  }
  return all;
#else
  (void)names;
  return false;
#endif
}

}  // namespace tfring
