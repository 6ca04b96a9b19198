"""tfring.tensorflow's collectives and runtime control under Horovod's module name (`horovod.tensorflow.mpi_ops`).

The collectives live in `_reduce` (allreduce), `_gather` (allgather, broadcast, alltoall) and `_reducescatter`; the
op library, naming and argument checks in `_handles` (the same split as every binding's); gradients in
`_gradients`.
"""
import tensorflow as tf

from tfring.common.reduce_ops import (Adasum, Average, Max, Min, Product, ReduceOp, Sum,  # noqa: F401
                                      check_num_rank_power_of_2, handle_average_backwards_compatibility)
from tfring.tensorflow import _graph_order, _handles as _h  # noqa: F401 (_graph_order: on import)
from tfring.tensorflow._gather import allgather, alltoall, broadcast, grouped_allgather  # noqa: F401
from tfring.tensorflow._reduce import allreduce, grouped_allreduce  # noqa: F401
from tfring.tensorflow._reducescatter import grouped_reducescatter, reducescatter  # noqa: F401
from tfring.tensorflow._topology_ops import (local_rank_op, local_size_op, process_set_included_op,  # noqa: F401
                                             rank_op, size_op)


def join(process_set=None):
    """Marks this rank as out of data: it contributes zeros to the set's allreduces until every rank joined.

    Args:
        process_set: the `tfring.ProcessSet` to join (default: all ranks).

    Returns:
        The global rank that joined last (an int eagerly, a tensor in a graph).

    Raises:
        ValueError: tfring is not initialized, or `process_set` is not registered.
    """
    _h.require_init("join")
    result = _h.ops().horovod_join(process_set_id=_h.set_id("join", process_set))
    return int(result) if tf.executing_eagerly() else result


def barrier(process_set=None):
    """Waits until every rank of the set reached this barrier.

    Args:
        process_set: the `tfring.ProcessSet` (default: all ranks).

    Returns:
        The op (eagerly: already run).

    Raises:
        ValueError: tfring is not initialized, or `process_set` is not registered.
    """
    _h.require_init("barrier")
    return _h.ops().horovod_barrier(process_set_id=_h.set_id("barrier", process_set))
