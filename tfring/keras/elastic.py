"""`tfring.keras.elastic` (Horovod's `horovod.tensorflow.keras.elastic`): `KerasState`, `run` and the elastic
Keras callbacks, on the Keras backend in use (tf_keras too). The machinery (ULFM shrink, spawned newcomers) is
tfring.common.elastic's."""
import importlib

import keras
import numpy as np

from tfring.common.elastic import state as _state
from tfring.common.elastic.run import run  # noqa: F401
from tfring.common.elastic.variables_state import VariablesState
from tfring.common.errors import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from tfring.keras._backend import glue

State, ObjectState = _state.binding_states(
    "tfring.keras", lambda obj, **kwargs: glue().binding.broadcast_object(obj, **kwargs), __name__)


class KerasState(VariablesState):
    """A Keras model and its optimizer, plus `ObjectState` attributes (`epoch=0, batch=0`), as Horovod's, on
    every backend (Keras 3, or tf_keras on TensorFlow).

    The optimizer is built before the first sync, so a rank that joins holds the same variables as the others.
    On JAX the trainer's state is written back into the variables before each copy (a commit inside `fit`).
    After a reset the model's compiled functions are dropped, so they are traced again for the new ranks.

    Args:
        model: the Keras model.
        optimizer: its optimizer (default: `model.optimizer`).
        backend: accepted for Horovod compatibility (unused).
        **kwargs: plain attributes, as `ObjectState`.
    """

    _default_bcast_object = staticmethod(ObjectState._default_bcast_object)

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        sharded = getattr(_distributed(optimizer if optimizer is not None else getattr(model, "optimizer", None)),
                          "sharded", 0)
        if sharded:
            # A commit would keep each rank's shard only, and the shards' sizes follow the job's size; said by
            # name rather than restoring a dead rank's shard from another's (docs/sharded-optimizer.md).
            raise ValueError("tfring.keras.elastic.KerasState: the optimizer is sharded=%d, which elastic Keras "
                             "jobs do not support yet (a commit holds each rank's shard only); use sharded=False "
                             "(tfring.torch's sharded optimizer does work in elastic jobs)" % sharded)
        super().__init__(model=model, optimizer=optimizer, **kwargs)

    def _broadcast(self, variables):
        glue().broadcast_variables(variables, 0, None)
        # PowerSGD's error is each rank's own residual: rank 0's, now on every rank, would count n times in the next
        # step. It starts again from zero (Q, the same everywhere after the broadcast, is kept).
        for error in getattr(getattr(_distributed(self.optimizer), "_powersgd", None), "errors", {}).values():
            error.assign(keras.ops.zeros_like(error.value))

    def _to_numpy(self, variable):
        return keras.ops.convert_to_numpy(variable) if isinstance(variable, keras.Variable) else \
            np.asarray(variable)

    def _before_save(self):
        glue().sync_model_state(self.model)


def _distributed(optimizer):
    """The DistributedOptimizer itself, also inside the loss scaling tfring puts around it (mixed_float16)."""
    return getattr(optimizer, "inner_optimizer", optimizer) if isinstance(
        optimizer, keras.optimizers.LossScaleOptimizer) else optimizer


_CALLBACKS = ("CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback")


def __getattr__(name):
    # The elastic callbacks stand on this layer (tfring.callbacks.elastic_state): reached by name, not imported back.
    if name in _CALLBACKS:
        return getattr(importlib.import_module("tfring.callbacks.elastic_state"), name)
    raise AttributeError("module 'tfring.keras.elastic' has no attribute %r" % (name,))
