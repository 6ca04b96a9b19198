"""tfring.torch's collectives and runtime control under Horovod's module name (`horovod.torch.mpi_ops`).

The collectives live in `_reduce` (allreduce), `_gather` (allgather, broadcast, alltoall) and `_reducescatter`
(with the sparse allreduce); the extension, handles, `poll` and `synchronize` in `_handles` (the same split as every
binding's). Every function here runs on the runtime the TensorFlow binding uses too (one per process).
"""
# init/shutdown are tfring.common.basics' own: every shutdown (an elastic reset too) clears this binding's handles and
# restarts its names through basics' shutdown hook (tfring/torch/_handles.py).
from tfring.common.basics import *  # noqa: F401,F403 (Horovod's basics: init, rank, size, ..., listed there)
from tfring.common.errors import HorovodInternalError  # noqa: F401
from tfring.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401
from tfring.torch import _handles as _h
from tfring.torch._gather import (allgather, allgather_async, alltoall, alltoall_async, broadcast,  # noqa: F401
                                  broadcast_, broadcast_async, broadcast_async_, grouped_allgather,
                                  grouped_allgather_async)
from tfring.torch._handles import (Adasum, Average, Max, Min, Product, Sum,  # noqa: F401
                                   handle_average_backwards_compatibility, poll, synchronize)
from tfring.torch._reduce import (allreduce, allreduce_, allreduce_async, allreduce_async_,  # noqa: F401
                                  grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                                  grouped_allreduce_async_)
from tfring.torch._reducescatter import (grouped_reducescatter, grouped_reducescatter_async,  # noqa: F401
                                         reducescatter, reducescatter_async, sparse_allreduce_async)


def join(device=-1):
    """Declares that this rank has no more data: until every rank has joined, it takes part in the other ranks'
    allreduces with zeros (Average divides by every rank of the set, joined ones included, as Horovod). Blocks
    until every rank joined.

    Other collectives (allgather, broadcast, ...) fail on the ranks still running while some rank has joined.

    Args:
        device: ignored (Horovod's GPU device for the zeros; tfring joins in host memory).

    Returns:
        int: the rank that joined last (the same on every rank).

    Raises:
        RuntimeError: tfring is not initialized, or the job was shut down.
    """
    handle = _h.submit(_h.C.join_async(0), None, lambda outputs: int(outputs[0]))
    return _h.synchronize(handle)


def barrier(process_set=global_process_set):
    """Blocks until every rank of the process set has called it.

    Args:
        process_set: the ranks that take part (default: all).

    Raises:
        ValueError: the process set is not registered, or this rank is not in it.
        RuntimeError: tfring is not initialized, or the job was shut down.
    """
    pid = _h.set_id("barrier", process_set)
    _h.synchronize(_h.submit(_h.C.barrier_async(pid), None, lambda outputs: None))
