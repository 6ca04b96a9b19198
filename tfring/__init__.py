"""tfring: Horovod-style data-parallel training for TensorFlow 2.21 / Keras 3.

    import tfring as hvd
    hvd.init()
    y = hvd.allreduce(x)          # averaged over all ranks

`import tfring` is cheap (the launcher imports it): it only checks that the op library was built for the
installed TensorFlow. TensorFlow and the op library load on first use of the API.
"""
import importlib

from tfring import _lib

_lib.check_tensorflow_version()  # fails here, with how to rebuild, if the library was built for another TF

from tfring.version import __version__  # noqa: E402 (after the TF check)

_API = {
    "tfring.basics": ["ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "gloo_built",
                      "gloo_enabled", "init", "is_homogeneous", "is_initialized", "knob_table", "local_rank",
                      "local_size", "mpi_built",
                      "mpi_enabled", "mpi_threads_supported", "nccl_built", "rank", "rocm_built", "shutdown", "size",
                      "start_timeline", "stop_timeline", "tunables"],
    "tfring.compat_optimizer": ["DistributedOptimizer"],
    "tfring.compression": ["Compression"],
    "tfring.functions": ["allgather_object", "broadcast_", "broadcast_global_variables", "broadcast_object",
                         "broadcast_object_fn", "broadcast_variables"],
    "tfring.ops": ["Adasum", "Average", "Max", "Min", "Product", "ReduceOp", "Sum", "allgather", "allreduce",
                   "check_num_rank_power_of_2", "handle_average_backwards_compatibility",
                   "alltoall", "barrier", "broadcast", "grouped_allgather", "grouped_allreduce",
                   "grouped_reducescatter", "join", "local_rank_op", "local_size_op", "process_set_included_op",
                   "rank_op", "reducescatter", "size_op"],
    "tfring.process_sets": ["ProcessSet", "add_process_set", "global_process_set", "remove_process_set"],
    "tfring.sync_batch_norm": ["SyncBatchNormalization"],
    "tfring.tape": ["DistributedGradientTape", "PartialDistributedGradientTape"],
}
_WHERE = {name: module for module, names in _API.items() for name in names}
_SUBMODULES = ["elastic"]  # hvd.elastic, as in Horovod
__all__ = sorted(_WHERE) + _SUBMODULES


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module("tfring." + name)
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError("module 'tfring' has no attribute %r" % name)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
