"""`tfring.keras.elastic` (Horovod's `horovod.tensorflow.keras.elastic`): `KerasState`, `run` and the elastic
Keras callbacks, on the Keras backend in use (tf_keras too). The machinery (ULFM shrink, spawned newcomers) is
tfring.common.elastic's."""
import importlib

from tfring.common.elastic.run import run  # noqa: F401
from tfring.common.errors import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from tfring.keras._elastic_state import KerasState, ObjectState, State  # noqa: F401

_CALLBACKS = ("CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback")


def __getattr__(name):
    # The elastic callbacks stand on this layer (tfring.callbacks.elastic_state): reached by name, not imported back.
    if name in _CALLBACKS:
        return getattr(importlib.import_module("tfring.callbacks.elastic_state"), name)
    raise AttributeError("module 'tfring.keras.elastic' has no attribute %r" % (name,))
