"""tfring.jax's collectives and runtime control under Horovod's module name (`horovod.<framework>.mpi_ops`).

The collectives live in `_reduce` (allreduce), `_gather` (allgather, broadcast, alltoall) and `_reducescatter`; the
FFI handlers, naming and error mapping in `_handles` (the same split as every binding's).
"""
from tfring.common.process_sets import global_process_set
from tfring.jax import _handles as _h
from tfring.jax._gather import alltoall, allgather, broadcast, grouped_allgather, grouped_broadcast  # noqa: F401
from tfring.jax._reduce import allreduce, grouped_allreduce  # noqa: F401
from tfring.jax._reducescatter import grouped_reducescatter, reducescatter  # noqa: F401


def barrier(process_set=global_process_set):
    """Blocks until every rank of the set has called it (eager only).

    Args:
        process_set: the `tfring.ProcessSet` (default: all ranks).
    """
    _h.control(_h.BARRIER, _h.set_id("barrier", process_set))


def join(process_set=global_process_set):
    """This rank is out of data: until every rank of the set joined, it takes part in the others' allreduces
    with zeros (Average divides by the whole set, as Horovod). Eager only.

    Args:
        process_set: the `tfring.ProcessSet` to join (default: all ranks).

    Returns:
        int: the global rank that joined last, the same on every rank.
    """
    pid = _h.set_id("join", process_set)
    return _h.control(_h.JOIN, pid)  # the core restarts the set's unnamed counts on every member
