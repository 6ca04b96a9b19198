"""tfring: Horovod-style data-parallel training for TensorFlow 2.21 / Keras 3.

    import tfring as hvd
    hvd.init()
    y = hvd.allreduce(x)          # averaged over all ranks
"""
from tfring import _lib

_lib.load()  # fails here, with how to rebuild, if the op library does not match this TensorFlow

from tfring.basics import (cross_rank, cross_size, cuda_built, gloo_built, gloo_enabled, init, is_homogeneous,
                           is_initialized, knob_table, local_rank, local_size, mpi_built, mpi_enabled,
                           mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size)
from tfring.compression import Compression
from tfring.functions import allgather_object, broadcast_object, broadcast_variables
from tfring.ops import (Adasum, Average, Max, Min, Product, ReduceOp, Sum, allgather, allreduce, alltoall,
                        barrier, broadcast, grouped_allgather, grouped_allreduce, grouped_reducescatter, join,
                        local_rank_op, local_size_op, rank_op, reducescatter, size_op)
from tfring.tape import DistributedGradientTape

__version__ = "0.1.0"
