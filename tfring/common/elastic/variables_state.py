"""The one elastic state of variables (TensorFlow's `TensorFlowState`/`TensorFlowKerasState`, the Keras
`KerasState` on every backend), framework-free: the variables kept as host copies at each commit, assigned back
on a rollback, broadcast from rank 0 on `sync()`. A binding's subclass says how variables broadcast and become
numpy; the model and optimizer are read through what Keras 3 and tf_keras both have."""
import numpy as np

from tfring.common.elastic.state import ObjectState


class VariablesState(ObjectState):
    """A list of variables, or a Keras model and its optimizer, plus `ObjectState` attributes, committed,
    rolled back and synced together.

    Subclasses give `_broadcast(variables)` (from rank 0, in place) and may give `_to_numpy(variable)` and
    `_before_save()` (a backend whose trainer holds the state outside the variables writes it back there).

    Args:
        variables: the variables (with no model).
        model: a Keras model (Keras 3 or tf_keras), whose variables and its optimizer's are tracked.
        optimizer: the model's optimizer (default: `model.optimizer`).
        **kwargs: plain attributes, as `ObjectState`.
    """

    def __init__(self, variables=None, model=None, optimizer=None, **kwargs):
        self.variables = list(variables or [])
        self.model = model
        self.optimizer = optimizer if optimizer is not None or model is None else getattr(model, "optimizer", None)
        self._values = None
        super().__init__(**kwargs)
        self._save_variables()

    def _tracked(self):
        if self.model is None:
            return self.variables
        opt = self.optimizer
        # Built first, so a rank that joins holds the same slots and iterations as the others (tf_keras: no
        # `built`, and OptimizerV2's `variables` is a method).
        if opt is not None and hasattr(opt, "build") and not getattr(opt, "built", False):
            opt.build(self.model.trainable_variables)
        variables = list(self.model.variables)
        if opt is not None:
            seen = {id(v) for v in variables}
            optimizer_vars = opt.variables() if callable(opt.variables) else opt.variables
            variables += [v for v in optimizer_vars if id(v) not in seen]
            # tf_keras's optimizers keep the learning rate in a variable outside `variables`: a reset callback's
            # new rate would not reach a rank that joins (a schedule is an object, not a variable: it stays).
            inner = opt
            while getattr(inner, "inner_optimizer", None) is not None:  # (a loss scaling around the wrapper too)
                inner = inner.inner_optimizer
            rate = getattr(inner, "_learning_rate", None)
            if hasattr(rate, "assign") and all(v is not rate for v in variables):
                variables.append(rate)
        return variables

    def _broadcast(self, variables):
        raise NotImplementedError

    def _to_numpy(self, variable):
        return np.asarray(variable)

    def _before_save(self):
        """Nothing to write back by default."""

    def _save_variables(self):
        self._before_save()
        self._values = [np.array(self._to_numpy(v), copy=True) for v in self._tracked()]

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
        values, tracked = snapshot["values"] or [], self._tracked()
        shapes = [tuple(v.shape) for v in tracked]
        if [tuple(getattr(x, "shape", ())) for x in values] != shapes:  # another model than the one committed
            raise ValueError("the commit holds %d variables of shapes %s; this model has %d of shapes %s" % (
                len(values), [tuple(getattr(x, "shape", ())) for x in values][:8], len(shapes), shapes[:8]))
        self._values = values

    def sync(self):
        self._resume_after_restart()
        tracked = self._tracked()
        if tracked:
            self._broadcast(tracked)
        self._save_variables()
        super().sync()

    def reset(self):
        # After a reset the model's compiled functions are dropped, so they are traced again for the new ranks.
        for attr in ("train_function", "test_function", "predict_function"):
            if self.model is not None and getattr(self.model, attr, None) is not None:
                setattr(self.model, attr, None)
