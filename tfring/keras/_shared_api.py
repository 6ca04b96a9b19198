"""What tfring.keras takes from the JAX or torch binding: the names every binding shares (Horovod's basics,
reduce ops, process sets, compression, object collectives, join/barrier)."""
from tfring.keras._backend import glue

_binding = glue().binding
_NAMES = ("init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank",
          "cross_size", "is_homogeneous", "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled",
          "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "start_timeline",
          "stop_timeline", "join", "barrier", "Average", "Sum", "Adasum", "Min", "Max", "Product", "ProcessSet",
          "global_process_set", "add_process_set", "remove_process_set", "Compression", "broadcast_object",
          "allgather_object", "HorovodInternalError", "HostsUpdatedInterrupt")
__all__ = [n for n in _NAMES if hasattr(_binding, n)]
globals().update({n: getattr(_binding, n) for n in __all__})
