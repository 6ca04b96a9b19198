"""`tfring.keras.elastic` (Horovod's `horovod.tensorflow.keras.elastic`): `KerasState`, `run` and the elastic
Keras callbacks, for Keras 3 and tf_keras (TF_USE_LEGACY_KERAS=1)."""
from tfring.keras._backend import name as _backend_name

if _backend_name() != "tensorflow":
    raise NotImplementedError("tfring.keras.elastic (KerasState and its callbacks) runs on the TensorFlow backend "
                              "only so far; the Keras backend is %r" % (_backend_name(),))
from tfring.callbacks.elastic_state import (CommitStateCallback, UpdateBatchStateCallback,  # noqa: F401
                                            UpdateEpochStateCallback)
from tfring.tensorflow.elastic import (HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State,  # noqa: F401
                                       TensorFlowKerasState, run)


class KerasState(TensorFlowKerasState):
    """A Keras model and optimizer plus plain attributes (`epoch=0, batch=0`), as Horovod's `KerasState`.

    Args:
        model: the Keras model.
        optimizer: its optimizer (default: `model.optimizer`).
        **kwargs: plain attributes.
    """

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, **kwargs)
