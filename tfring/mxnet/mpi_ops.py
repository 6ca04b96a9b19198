"""tfring.mxnet's collectives and runtime control under Horovod's module name (`horovod.mxnet.mpi_ops`).

Allreduce and broadcast are pushed into MXNet's engine and return at once: the engine orders them after the
pending writes of their inputs, and reads of their outputs wait for them, as for any MXNet operator. Allgather,
alltoall and reducescatter block until done (Horovod's mxnet allgather and alltoall block too).

The collectives live in `_reduce`, `_gather` (broadcast, allgather, alltoall) and `_reducescatter`; the
extension, naming, error mapping and the two ways a collective runs in `_handles` (the same split as every
binding's).

Errors: a bad argument raises `InvalidArgumentError` (both Horovod's MXNetError and a ValueError), any other
failure MXNetError (a RuntimeError); on the engine path they are raised when the result is read.
"""
import atexit
import sys

import mxnet as mx

from tfring.common import basics as _basics
from tfring.common.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,  # noqa: F401
                                  gloo_enabled, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                                  mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, size,
                                  start_timeline, stop_timeline)
from tfring.common.errors import HorovodInternalError  # noqa: F401
from tfring.common.reduce_ops import Adasum, Average, Max, Min, Product, Sum, resolve_op  # noqa: F401
from tfring.mxnet._gather import allgather, alltoall, broadcast, broadcast_, grouped_allgather  # noqa: F401
from tfring.mxnet._handles import InvalidArgumentError  # noqa: F401
from tfring.mxnet._reduce import allreduce, allreduce_, grouped_allreduce, grouped_allreduce_  # noqa: F401
from tfring.mxnet._reducescatter import grouped_reducescatter, reducescatter  # noqa: F401
from tfring.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                        process_set_id_of, remove_process_set)

_exit_wait_registered = False


def init(comm=None, process_sets=None):
    """Starts tfring (see `tfring.common.basics.init`); at interpreter exit, MXNet's pending work runs first.

    tfring shuts itself down at interpreter exit (an atexit handler registered by the first init). Allreduce and
    broadcast may still be queued in MXNet's engine then (a result never read, a script ending in an exception):
    the handler registered here runs before that shutdown (atexit runs the last registered first) and waits for
    MXNet's engine, so those collectives complete on every rank instead of failing with "tfring has been shut
    down" (here and on the ranks that read them).

    Args:
        comm: run on MPI_COMM_WORLD (None), on an mpi4py communicator, or on a list of MPI_COMM_WORLD ranks.
        process_sets: `ProcessSet` objects to register (Horovod's static process sets); every rank passes the
            same list.

    Raises:
        ValueError: `comm` or a process set is invalid.
        TypeError: `comm` is neither a communicator nor a list.
        RuntimeError: the runtime failed to start.
    """
    global _exit_wait_registered
    _basics.init(comm, process_sets)
    if not _exit_wait_registered:
        atexit.register(_wait_for_engine_at_exit)  # after the core's own atexit shutdown, so it runs before it
        _exit_wait_registered = True


def _wait_for_engine_at_exit():
    """Completes MXNet's pending work (tfring collectives among it) before tfring's atexit shutdown. A pending
    collective that fails (a peer already shut down, ranks disagree) is reported in one line; a collective some
    peer never submits fails after TFRING_STALL_SHUTDOWN_TIME_SECONDS, like any stalled collective."""
    if not _basics.is_initialized():
        return  # shut down already (shutdown() waited for the engine then)
    try:
        mx.nd.waitall()
    except Exception as e:  # noqa: BLE001 (an exit handler: report, never raise)
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        sys.stderr.write("tfring.mxnet: MXNet work still pending at exit failed: %s\n" %
                         (lines[-1] if lines else type(e).__name__))
        sys.stderr.flush()


def shutdown():
    """Waits for MXNet's pending operations (ours among them), then stops the background thread.

    Raises:
        mxnet.base.MXNetError: a pending operation failed (tfring is shut down all the same).
    """
    try:
        mx.nd.waitall()
    finally:
        _basics.shutdown()  # the core restarts the names of unnamed collectives
