"""`tfring.keras.elastic` (Horovod's `horovod.tensorflow.keras.elastic`): `KerasState`, `run` and the elastic
Keras callbacks, on the Keras backend in use (TensorFlow and tf_keras through tfring.tensorflow.elastic; JAX and
torch through tfring.keras._elastic_state). The machinery (ULFM shrink, spawned newcomers) is
tfring.common.elastic's."""
from tfring.callbacks.elastic_state import (CommitStateCallback, UpdateBatchStateCallback,  # noqa: F401
                                            UpdateEpochStateCallback)
from tfring.common.elastic.run import run  # noqa: F401
from tfring.common.errors import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from tfring.keras._backend import name as _backend_name

if _backend_name() == "tensorflow":
    from tfring.tensorflow.elastic import ObjectState, State, TensorFlowKerasState  # noqa: F401

    class KerasState(TensorFlowKerasState):
        """A Keras model and optimizer plus plain attributes (`epoch=0, batch=0`), as Horovod's `KerasState`.

        Args:
            model: the Keras model.
            optimizer: its optimizer (default: `model.optimizer`).
            **kwargs: plain attributes.
        """

        def __init__(self, model, optimizer=None, **kwargs):
            super().__init__(model, optimizer=optimizer, **kwargs)
else:
    from tfring.keras._elastic_state import KerasState, ObjectState, State  # noqa: F401
