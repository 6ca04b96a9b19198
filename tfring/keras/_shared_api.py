"""What tfring.keras takes from the backend's binding: the names every binding shares (Horovod's basics, reduce
ops, process sets, compression, object collectives, join/barrier); on TensorFlow every name of tfring.tensorflow
(as horovod.tensorflow.keras re-exports horovod.tensorflow), the Keras layer's own names set after these."""
from tfring.common import basics
from tfring.keras._backend import glue

_binding = glue().binding
_NAMES = tuple(basics.__all__) + (
    "join", "barrier", "Average", "Sum", "Adasum", "Min", "Max", "Product", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set", "Compression", "broadcast_object", "allgather_object",
    "HorovodInternalError", "HostsUpdatedInterrupt")
__all__ = [n for n in (_binding.__all__ if glue().EXPORTS_WHOLE_BINDING else _NAMES)
           if hasattr(_binding, n) and n != "elastic"]
globals().update({n: getattr(_binding, n) for n in __all__})
