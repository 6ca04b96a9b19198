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
    A sharded optimizer (`DistributedOptimizer(..., sharded=1 or 2)`) is committed in its unsharded layout and
    cut again for the job's new size after a reset (docs/sharded-optimizer.md).

    Args:
        model: the Keras model.
        optimizer: its optimizer (default: `model.optimizer`).
        backend: accepted for Horovod compatibility (unused).
        **kwargs: plain attributes, as `ObjectState`.
    """

    _default_bcast_object = staticmethod(ObjectState._default_bcast_object)

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        dist = _distributed(optimizer if optimizer is not None else getattr(model, "optimizer", None))
        # A sharded optimizer's state is committed in its unsharded layout (every rank keeps all of it: the shards'
        # owners change with the job's size) and cut again after a reset (docs/sharded-optimizer.md).
        self._sharded = dist if getattr(dist, "sharded", 0) else None
        self._optimizer_values, self._rolled_back, self._constructed = None, False, False
        super().__init__(model=model, optimizer=optimizer, **kwargs)
        self._constructed = True

    def _tracked(self):
        tracked = super()._tracked()  # (builds the optimizer first)
        if self._sharded is None:
            return tracked
        own = {id(v) for v in self._sharded.variables}
        return [v for v in tracked if id(v) not in own]  # the model's, and an outer loss scaling's

    def _save_variables(self):
        # The optimizer's collective first (not in the constructor, which a process a growth added runs alone): a
        # failure inside it leaves the last commit whole, the model's values and the attributes included.
        values = None
        if self._sharded is not None and self._constructed:
            self._before_save()
            values = self._sharded.sharded_state()
        super()._save_variables()
        if values is not None:
            self._optimizer_values = values

    def restore(self):
        super().restore()
        if self._sharded is not None and self._optimizer_values is not None:
            # The optimizer's commit is loaded after the reset, cut for the job's new size; until then its variables
            # must not keep what the failed step left (on JAX an array holding the step's error). (No commit yet: a
            # failure in the first sync, before any step; the variables stay as they are.)
            for v in self._sharded.variables:
                v.assign(np.zeros(tuple(v.shape), v.dtype))
            self._rolled_back = True

    def reset(self):
        super().reset()
        if self._sharded is not None and self._optimizer_values is not None:  # (a process just added has none)
            if self._sharded.reshard() or self._rolled_back:
                self._sharded.load_sharded_state(self._optimizer_values)
        self._rolled_back = False

    def sync(self):
        if self._sharded is not None:
            self._resume_after_restart()  # rank 0 may take up a commit from disk (restore() then cleared the state)
            self._sharded.reshard()
            error = None
            if self._rolled_back:  # (rank 0, resumed from disk) a commit that does not fit fails every rank alike
                try:
                    self._sharded.load_sharded_state(self._optimizer_values)
                except Exception as e:  # noqa: BLE001 - raised on every rank below
                    error = "tfring.elastic: cannot load the commit's optimizer state: %s: %s" % (type(e).__name__, e)
                self._rolled_back = False
            # Only a process without a commit (added by a growth, or every rank but 0 after a restart) takes rank
            # 0's: a survivor's optimizer already holds the job's state (reset() loaded the commit, or nothing
            # changed), so the whole state travels only when someone needs it. The values not cut into shards
            # (iterations, the learning rate a reset callback set) are rank 0's current ones, as an unsharded
            # optimizer's are (Horovod).
            told = glue().binding.allgather_object((self._optimizer_values is None, error), name="elastic.sharded")
            errors = [e for _, e in told if e]
            if errors:
                raise RuntimeError(errors[0])
            needed = any(none for none, _ in told)
            values, plain = self._bcast_object((self._optimizer_values if needed else None,
                                                self._sharded.plain_state()))
            if values is not None and self._optimizer_values is None:
                self._sharded.load_sharded_state(values)
            self._sharded.load_plain_state(plain)
        super().sync()

    def _snapshot(self):
        snapshot = super()._snapshot()
        return snapshot if self._sharded is None else dict(snapshot, optimizer=self._optimizer_values)

    def _load_snapshot(self, snapshot):
        super()._load_snapshot(snapshot)
        if self._sharded is not None:
            if "optimizer" not in snapshot:
                raise ValueError("the commit was written without a sharded optimizer; this job's is sharded=%d"
                                 % self._sharded.sharded)
            self._optimizer_values = snapshot["optimizer"]

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
