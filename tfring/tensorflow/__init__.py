"""tfring for TensorFlow (Horovod's `horovod.tensorflow`): `import tfring.tensorflow as hvd`, or `import tfring as
hvd`, which loads this module on first use.

    hvd.init()
    y = hvd.allreduce(x)          # averaged over all ranks

Importing it loads TensorFlow and tfring's op library (checked against the installed TensorFlow) and registers
the collectives' gradients, as Horovod's import does.
"""
from tfring.common import basics as _basics
from tfring.common.basics import *  # noqa: F401,F403 (Horovod's basics: init, rank, size, ..., listed there)
from tfring.common.monitor import label_tensor, mark_step, metrics, straggler  # noqa: F401
from tfring.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from tfring.tensorflow import _library

_library.load()  # the op library, checked against this TensorFlow: fails here with how to rebuild

from tfring.tensorflow import _gradients  # noqa: E402 (registers the collectives' gradients)
from tfring.tensorflow.compat_optimizer import DistributedOptimizer  # noqa: E402
from tfring.tensorflow.compression import Compression  # noqa: E402
from tfring.tensorflow.functions import (allgather_object, broadcast_, broadcast_global_variables,  # noqa: E402
                                         broadcast_object, broadcast_object_fn, broadcast_variables)
from tfring.tensorflow.mpi_ops import (Adasum, Average, Max, Min, Product, ReduceOp, Sum, allgather,  # noqa: E402
                                       allreduce, alltoall, barrier, broadcast, check_num_rank_power_of_2,
                                       grouped_allgather, grouped_allreduce, grouped_reducescatter,
                                       handle_average_backwards_compatibility, join, local_rank_op, local_size_op,
                                       process_set_included_op, rank_op, reducescatter, size_op)
from tfring.tensorflow.tape import DistributedGradientTape, PartialDistributedGradientTape  # noqa: E402
from tfring.tensorflow import elastic  # noqa: E402 (hvd.elastic, as in Horovod)
from tfring.tensorflow import sync_batch_norm  # noqa: E402
from tfring.version import __version__  # noqa: E402


__all__ = list(_basics.__all__) + [  # Horovod's horovod.tensorflow names (also `import tfring as hvd`'s)
    "Adasum", "Average", "Compression", "DistributedGradientTape", "DistributedOptimizer", "Max", "Min",
    "PartialDistributedGradientTape", "ProcessSet", "Product", "ReduceOp", "Sum", "SyncBatchNormalization",
    "add_process_set", "allgather", "allgather_object", "allreduce", "alltoall", "barrier", "broadcast", "broadcast_",
    "broadcast_global_variables", "broadcast_object", "broadcast_object_fn", "broadcast_variables",
    "check_num_rank_power_of_2", "elastic", "global_process_set", "grouped_allgather", "grouped_allreduce",
    "grouped_reducescatter", "handle_average_backwards_compatibility", "join", "local_rank_op", "local_size_op",
    "process_set_included_op", "rank_op", "reducescatter", "remove_process_set", "size_op", "label_tensor", "mark_step",
    "metrics", "straggler"]


def __getattr__(name):
    if name == "SyncBatchNormalization":  # the Keras layer's (see sync_batch_norm.py)
        return sync_batch_norm.SyncBatchNormalization
    raise AttributeError("module 'tfring.tensorflow' has no attribute %r" % (name,))
