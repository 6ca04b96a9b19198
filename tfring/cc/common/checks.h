// Error checks for the libraries the core calls (MPI, CUDA, NCCL): each failure becomes a Status whose message
// names the call and where it was made (file:line), so a report from one rank points at the line.
// The macros need the library's header only where they are expanded.
#pragma once
#include <string>

#include "status.h"

#define TFR_STRINGIFY_(x) #x
#define TFR_STRINGIFY(x) TFR_STRINGIFY_(x)
// "call (file.cc:123)": the text every check message uses.
#define TFR_CALL_SITE(call) call " (" __FILE__ ":" TFR_STRINGIFY(__LINE__) ")"

// MPI: MpiError (mpi_context.h) adds MPI's error string.
#define TFR_CHECK_MPI(call)                                                               \
  do {                                                                                    \
    int _tfr_rc = (call);                                                                 \
    if (_tfr_rc != MPI_SUCCESS) return ::tfring::MpiError(TFR_CALL_SITE(#call), _tfr_rc); \
  } while (0)

#define TFR_CHECK_CUDA(expr)                                                                             \
  do {                                                                                                   \
    cudaError_t _tfr_err = (expr);                                                                       \
    if (_tfr_err != cudaSuccess)                                                                         \
      return ::tfring::Status::Unknown(std::string("tfring: CUDA error in " TFR_CALL_SITE(#expr) ": ") + \
                                       cudaGetErrorString(_tfr_err));                                    \
  } while (0)

// NCCL calls on a communicator: communicators are non-blocking (so creation and every call have a deadline), and
// any call may answer ncclInProgress; NcclWait (nccl_context.h) polls until it finished or the deadline passed.
#define TFR_NCCL(c, expr) TFR_RETURN_IF_ERROR(::tfring::NcclWait((c), (expr), TFR_CALL_SITE(#expr)))
