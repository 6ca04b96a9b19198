"""Elastic state for Keras 3 on the JAX and torch backends (TensorFlow's is tfring.tensorflow.elastic): the
model's and optimizer's variables kept as host copies at each commit, assigned back on a rollback, broadcast from
rank 0 on `sync()`, with the backend binding's collectives."""
import keras
import numpy as np

from tfring.common.elastic import state as _state
from tfring.keras._backend import glue


def _bcast_object(obj):
    return glue().binding.broadcast_object(obj, root_rank=0, name="tfring.keras.elastic.state")


class State(_state.State):
    """Horovod's `State` base class, broadcasting with the backend binding's `broadcast_object`.

    Args:
        bcast_object: how an object travels from rank 0 (default: the binding's `broadcast_object`).
        get_rank: accepted for Horovod compatibility (unused).
    """

    _default_bcast_object = staticmethod(_bcast_object)


class ObjectState(_state.ObjectState):
    """Plain Python attributes committed, rolled back and synced (`ObjectState(epoch=0)` gives `state.epoch`).

    Args:
        bcast_object: how an object travels from rank 0 (default: the binding's `broadcast_object`).
        get_rank: accepted for Horovod compatibility (unused).
        **kwargs: the attributes and their initial values.
    """

    _default_bcast_object = staticmethod(_bcast_object)


class KerasState(ObjectState):
    """A Keras model and its optimizer, plus `ObjectState` attributes (`epoch=0, batch=0`), as Horovod's.

    The optimizer is built before the first sync, so a rank that joins holds the same variables as the others.
    On JAX the trainer's state is written back into the variables before each copy (a commit inside `fit`).
    After a reset the model's compiled functions are dropped, so they are traced again for the new ranks.

    Args:
        model: the Keras model.
        optimizer: its optimizer (default: `model.optimizer`).
        backend: accepted for Horovod compatibility (unused).
        **kwargs: plain attributes, as `ObjectState`.
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self._values = None
        super().__init__(**kwargs)
        self._save_variables()

    def _tracked(self):
        opt = self.optimizer
        if opt is not None and not opt.built:
            opt.build(self.model.trainable_variables)
        variables = list(self.model.variables)
        seen = {id(v) for v in variables}
        return variables + [v for v in (opt.variables if opt is not None else []) if id(v) not in seen]

    def _save_variables(self):
        glue().sync_model_state(self.model)
        self._values = [np.array(keras.ops.convert_to_numpy(v), copy=True) for v in self._tracked()]

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        for v, value in zip(self._tracked(), self._values or []):
            v.assign(value)
        super().restore()

    def _snapshot(self):
        return dict(super()._snapshot(), values=self._values)

    def _load_snapshot(self, snapshot):
        super()._load_snapshot(snapshot)
        self._values = snapshot["values"]

    def sync(self):
        self._resume_after_restart()
        glue().broadcast_variables(self._tracked(), 0, None)
        self._save_variables()
        super().sync()

    def reset(self):
        for attr in ("train_function", "test_function", "predict_function"):
            if getattr(self.model, attr, None) is not None:
                setattr(self.model, attr, None)
