"""tfring for MXNet 1.9: Horovod's `horovod.mxnet` API on tfring's runtime (no TensorFlow needed).

    import tfring.mxnet as hvd
    hvd.init()
    y = hvd.allreduce(x)          # averaged over all ranks, pushed into MXNet's engine
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})

Allreduce and broadcast run as MXNet engine operators (asynchronous, ordered by the arrays they read and
write); allgather, alltoall and reducescatter block. CPU arrays only.
"""
from tfring.mxnet.compression import Compression  # noqa: F401
from tfring.mxnet.functions import allgather_object, broadcast_object  # noqa: F401
from tfring.mxnet.mpi_ops import (Adasum, Average, HorovodInternalError, InvalidArgumentError, Max, Min,  # noqa: F401
                                  Product, ProcessSet, Sum, add_process_set, allgather, allreduce, allreduce_, alltoall,
                                  broadcast, broadcast_, ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                                  global_process_set, gloo_built, gloo_enabled, grouped_allgather, grouped_allreduce,
                                  grouped_allreduce_, grouped_reducescatter, init, is_homogeneous, is_initialized,
                                  local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                                  rank, reducescatter, remove_process_set, rocm_built, shutdown, size, start_timeline,
                                  stop_timeline)
from tfring.mxnet.optimizer import (DistributedOptimizer, DistributedTrainer,  # noqa: F401
                                    broadcast_parameters)
