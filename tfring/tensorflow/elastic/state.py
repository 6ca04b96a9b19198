"""TensorFlow and Keras states (Horovod's `TensorFlowState`, `TensorFlowKerasState`): variables kept as host
copies at each commit, assigned back on a rollback, broadcast from rank 0 on `sync()`."""
from tfring.common.elastic import state as _state
from tfring.tensorflow.functions import broadcast_object


def _bcast_object(obj):
    return broadcast_object(obj, root_rank=0, name="tfring.tensorflow.elastic.state")


class State(_state.State):
    """Horovod's `State` base class, broadcasting with `tfring.tensorflow.broadcast_object`.

    Args:
        bcast_object: how an object travels from rank 0 (default `tfring.tensorflow.broadcast_object`).
        get_rank: accepted for Horovod compatibility (unused).
    """

    _default_bcast_object = staticmethod(_bcast_object)


class ObjectState(_state.ObjectState):
    """Plain Python attributes committed, rolled back and synced (`ObjectState(epoch=0)` gives `state.epoch`),
    broadcasting with `tfring.tensorflow.broadcast_object`.

    Args:
        bcast_object: how an object travels from rank 0 (default `tfring.tensorflow.broadcast_object`).
        get_rank: accepted for Horovod compatibility (unused).
        **kwargs: the attributes and their initial values.
    """

    _default_bcast_object = staticmethod(_bcast_object)


def _optimizer_variables(optimizer):
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


class TensorFlowState(ObjectState):
    """A list of `tf.Variable`s (plus `ObjectState` attributes) committed, rolled back and synced together.

    Args:
        variables: the variables (default: none; TF1 collections are not supported).
        session: accepted for Horovod compatibility; must be None (TF2 eager).
        **kwargs: plain attributes, as `ObjectState`.

    Raises:
        ValueError: a session was given.
    """

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None:
            raise ValueError("tfring.tensorflow.elastic.TensorFlowState: session=%r: TF1 sessions are not supported; "
                             "pass variables in TF2 eager mode" % (session,))
        self.variables = list(variables or [])
        self._values = None
        super().__init__(**kwargs)
        self._save_variables()

    def _tracked(self):
        return self.variables

    def _save_variables(self):
        self._values = [v.numpy().copy() for v in self._tracked()]

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
        from tfring.tensorflow.functions import broadcast_variables
        self._resume_after_restart()
        tracked = self._tracked()
        if tracked:
            broadcast_variables(tracked, root_rank=0)
        self._save_variables()
        super().sync()


class TensorFlowKerasState(TensorFlowState):
    """A Keras model and its optimizer (Keras 3 or tf_keras), plus `ObjectState` attributes.

    The optimizer is built before the first sync so a rank that joins holds the same variables (slots,
    iterations) as the others. After a reset the model's compiled train/test/predict functions are dropped so
    they are traced again for the new number of ranks.

    Args:
        model: the Keras model.
        optimizer: its optimizer (default: `model.optimizer`).
        backend: accepted for Horovod compatibility (unused).
        **kwargs: plain attributes, as `ObjectState`.
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        super().__init__(**kwargs)

    def _build_optimizer(self):
        opt = self.optimizer
        if opt is not None and hasattr(opt, "build") and not getattr(opt, "built", False):  # tf_keras: no `built`
            opt.build(self.model.trainable_variables)

    def _tracked(self):
        self._build_optimizer()
        variables = list(self.model.variables)
        if self.optimizer is not None:
            seen = {id(v) for v in variables}
            variables += [v for v in _optimizer_variables(self.optimizer) if id(v) not in seen]
        return variables

    def reset(self):
        for attr in ("train_function", "test_function", "predict_function"):
            if getattr(self.model, attr, None) is not None:
                setattr(self.model, attr, None)
