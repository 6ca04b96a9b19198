"""tfring for PyTorch: Horovod's `horovod.torch` API on tfring's runtime (no TensorFlow needed).

    import tfring.torch as hvd
    hvd.init()
    y = hvd.allreduce(x)          # averaged over all ranks
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

The collectives, `init`, the topology queries and process sets are imported here; the optimizer, the object
helpers, SyncBatchNorm and `elastic` (Horovod's `horovod.torch.elastic`) load on first use.
"""
import importlib

from tfring.common.monitor import label_tensor, mark_step, metrics, straggler  # noqa: F401
from tfring.torch.compression import Compression  # noqa: F401
from tfring.torch.mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min, Product, ProcessSet,  # noqa: F401
                                  Sum, add_process_set, allgather, allgather_async, allreduce, allreduce_,
                                  allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast,
                                  broadcast_, broadcast_async, broadcast_async_, ccl_built, cross_rank, cross_size,
                                  cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled,
                                  grouped_allgather, grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                                  grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                                  grouped_reducescatter_async, init, is_homogeneous, is_initialized, join,
                                  local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                                  nccl_built, poll, rank, reducescatter, reducescatter_async, remove_process_set,
                                  rocm_built, shutdown, size, sparse_allreduce_async, start_timeline, stop_timeline,
                                  synchronize)

_LAZY = {
    "DistributedOptimizer": "tfring.torch.optimizer",
    "allgather_object": "tfring.torch.functions",
    "broadcast_object": "tfring.torch.functions",
    "broadcast_optimizer_state": "tfring.torch.functions",
    "broadcast_parameters": "tfring.torch.functions",
    "SyncBatchNorm": "tfring.torch.sync_batch_norm",
}


def __getattr__(name):
    if name == "elastic":  # hvd.elastic, as in Horovod (loads the elastic machinery only when used)
        return importlib.import_module("tfring.torch.elastic")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError("module 'tfring.torch' has no attribute %r" % name)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | {"elastic"})
