"""Elastic state for Keras on every backend: the model's and optimizer's variables kept as host copies at each
commit, assigned back on a rollback, broadcast from rank 0 on `sync()` (tfring.common.elastic.variables_state),
with the backend binding's collectives."""
import keras
import numpy as np

from tfring.common.elastic import state as _state
from tfring.common.elastic.variables_state import VariablesState
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
        super().__init__(model=model, optimizer=optimizer, **kwargs)

    def _broadcast(self, variables):
        glue().broadcast_variables(variables, 0, None)

    def _to_numpy(self, variable):
        return keras.ops.convert_to_numpy(variable) if isinstance(variable, keras.Variable) else \
            np.asarray(variable)

    def _before_save(self):
        glue().sync_model_state(self.model)
