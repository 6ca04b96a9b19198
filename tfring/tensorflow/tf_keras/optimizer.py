"""DistributedOptimizer for tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1): a public-API wrapper of the inner
tf_keras optimizer (tf_keras.optimizers.* or the OptimizerV2 ones in tf_keras.optimizers.legacy) that reduces
gradients in apply_gradients() and delegates the update."""
import copy

import tensorflow as tf
import tf_keras

from tfring.common import powersgd
from tfring.tensorflow.compression import Compression
from tfring.tensorflow.tf_keras.aggregation import GradientAggregator, check_passes
from tfring.common.optimizer_delegation import InnerOptimizerDelegation
from tfring.common.reduce_ops import Average, Sum
from tfring.tensorflow._powersgd import TapeState
from tfring.tensorflow.tape import GradientReducer

WHO = "tfring.keras.DistributedOptimizer (tf_keras)"
_COMPRESSIONS = {"none": Compression.none, "fp16": Compression.fp16, "bf16": Compression.bf16}


def optimizer_types():
    """The tf_keras optimizer base classes: the current one and the legacy OptimizerV2.

    Returns:
        tuple: the two classes.
    """
    return tf_keras.optimizers.Optimizer, tf_keras.optimizers.legacy.Optimizer


class _CallableList(list):
    """A list that is also callable (returns itself): `opt.variables` and OptimizerV2's `opt.variables()`."""

    def __call__(self):
        return self


class _Pending:
    """The gradients _compute_gradients() returned (already reduced), so apply_gradients() does not reduce them
    again. A plain object: tf_keras does not track it."""
    grads = None


@tf_keras.utils.register_keras_serializable(package="tfring")
class LegacyDistributedOptimizer(InnerOptimizerDelegation, tf_keras.optimizers.Optimizer):
    """Averages (op=Average) or sums (op=Sum) gradients over the ranks of process_set, then applies the inner
    optimizer. backward_passes_per_step=k (Horovod's semantics): every call accumulates the local gradients;
    every k-th call reduces their sum (or mean, average_aggregated_gradients=True) and applies it, the others only
    advance iterations. `_compute_gradients()` and `_agg_helper.counter` exist for Horovod compatibility.

    `tfring.keras.DistributedOptimizer(opt)` returns one of these for a tf_keras optimizer.

    Args:
        optimizer: a tf_keras.optimizers.Optimizer or tf_keras.optimizers.legacy.Optimizer (or its config).
        name, op, compression, sparse_as_dense: as for `tfring.keras.DistributedOptimizer`; compression is
            Compression.none/fp16/bf16 (or its name) or `Compression.powersgd(...)` (the tape's: its Q and error
            are kept outside the optimizer's variables, so a checkpoint does not hold them; not with groups).
        backward_passes_per_step, average_aggregated_gradients, gradient_predivide_factor: the same.
        groups, num_groups, process_set, device_dense, device_sparse, scale_local_gradients: the same.
        sharded: refused (a ValueError): sharding is built for Keras 3 optimizers.
        **kwargs: tf_keras.optimizers.Optimizer's arguments (learning_rate is the inner optimizer's).

    Raises:
        TypeError: `optimizer` is not a tf_keras optimizer.
        ValueError: malformed op, compression, backward_passes_per_step or groups, or sharded.
    """

    def __init__(self, optimizer, name=None, op=Average, compression=Compression.none, sparse_as_dense=False,
                 backward_passes_per_step=1, average_aggregated_gradients=False, gradient_predivide_factor=1.0,
                 groups=None, num_groups=0, process_set=None, device_dense="", device_sparse="",
                 scale_local_gradients=True, sharded=False, **kwargs):
        if sharded:
            raise ValueError("%s: sharded=%r is built for Keras 3 optimizers only (tfring.keras on any backend); "
                             "a tf_keras optimizer keeps its whole state" % (WHO, sharded))
        if isinstance(optimizer, dict):
            optimizer = tf_keras.optimizers.deserialize(copy.deepcopy(optimizer))
        if not isinstance(optimizer, optimizer_types()):
            raise TypeError("%s: optimizer must be a tf_keras.optimizers.Optimizer or a "
                            "tf_keras.optimizers.legacy.Optimizer, got %r" % (WHO, optimizer))
        if op not in (Average, Sum):
            raise ValueError("%s: op=%r must be Average or Sum" % (WHO, op))
        if isinstance(compression, str):
            if compression not in _COMPRESSIONS:
                raise ValueError("%s: compression=%r must be one of %s" % (WHO, compression, sorted(_COMPRESSIONS)))
            compression = _COMPRESSIONS[compression]
        if isinstance(compression, dict) and set(compression) == {"powersgd"}:  # get_config()'s spelling
            compression = powersgd.PowerSGD(**compression["powersgd"])
        if compression not in _COMPRESSIONS.values() and powersgd.settings(compression) is None:
            raise ValueError("%s: compression=%r is not one of Compression.none/fp16/bf16/powersgd(...)"
                             % (WHO, compression))
        reducer = GradientReducer(WHO, op, compression, sparse_as_dense, gradient_predivide_factor, groups,
                                  num_groups, process_set, device_dense, device_sparse, scale_local_gradients)
        if reducer.powersgd is not None:
            if backward_passes_per_step != 1:
                raise ValueError("%s: compression=%r does not combine with backward_passes_per_step=%r (as Keras 3's)"
                                 % (WHO, compression, backward_passes_per_step))
            # Its own step count, Q and errors (a tape's are shared by equal settings: tapes are made every step).
            reducer.powersgd = TapeState(reducer.powersgd.config)
        aggregator = (GradientAggregator(WHO, backward_passes_per_step, average_aggregated_gradients)
                      if check_passes(WHO, backward_passes_per_step) > 1 else None)
        kwargs.pop("learning_rate", None)
        super().__init__(name=name or "Distributed%s" % type(optimizer).__name__, **kwargs)
        self.inner_optimizer = optimizer
        self._tfring_args = (op, compression, sparse_as_dense, gradient_predivide_factor,
                             backward_passes_per_step, bool(average_aggregated_gradients))
        self._tfring_reducer = reducer
        self._tfring_pending = _Pending()
        # Horovod's attribute: None without aggregation; `.counter` counts the passes since the last reduction.
        self._agg_helper = aggregator

    def register_local_var(self, var):
        """Keeps var's gradient local: not reduced over ranks (only scaled, see scale_local_gradients).

        Args:
            var: a trainable variable of the model.
        """
        self._tfring_reducer.register_local(var)

    def _is_legacy(self):
        return isinstance(self.inner_optimizer, tf_keras.optimizers.legacy.Optimizer)

    def build(self, var_list):
        if not self._is_legacy():  # an OptimizerV2 creates its slots on its first apply_gradients()
            self.inner_optimizer.build(var_list)
        super().build(var_list)

    lr = InnerOptimizerDelegation.learning_rate  # tf_keras's older name for it

    @InnerOptimizerDelegation.iterations.setter
    def iterations(self, value):
        self.inner_optimizer.iterations = value

    @property
    def variables(self):
        inner = self.inner_optimizer.variables
        return _CallableList(inner() if self._is_legacy() else inner)

    def _reduce(self, grads, variables):
        """What Horovod does when it computes gradients: reduce them, or aggregate them (_agg_helper)."""
        if self._agg_helper is None:
            return self._tfring_reducer.reduce(grads, variables)
        return self._agg_helper.accumulate(grads, variables, self._tfring_reducer.reduce)

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        """Horovod compatibility (Horovod's tests call this private method): the local gradients of loss,
        reduced as apply_gradients() would reduce them (aggregated with backward_passes_per_step). Passing the
        returned pairs unchanged to apply_gradients() applies them without reducing them again."""
        tape = tf.GradientTape() if tape is None else tape
        if callable(loss):
            with tape:
                if not callable(var_list):
                    tape.watch(var_list)
                loss = loss()
        var_list = list(var_list() if callable(var_list) else var_list)
        grads = self._reduce(list(tape.gradient(loss, var_list, output_gradients=grad_loss)), var_list)
        self._tfring_pending.grads = grads
        return list(zip(grads, var_list))

    def get_gradients(self, loss, params):
        """Horovod compatibility: the inner optimizer's get_gradients(loss, params), reduced as
        _compute_gradients() reduces them (apply_gradients() then does not reduce them again).

        Args:
            loss: the loss tensor.
            params: the variables.

        Returns:
            list: the reduced gradients.
        """
        params = list(params)
        grads = self._reduce(list(self.inner_optimizer.get_gradients(loss, params)), params)
        self._tfring_pending.grads = grads
        return grads

    def _inner_apply(self, grads_and_vars, name, skip_gradients_aggregation, kwargs):
        if self._is_legacy():
            aggregate = kwargs.pop("experimental_aggregate_gradients", True) and not skip_gradients_aggregation
            return self.inner_optimizer.apply_gradients(grads_and_vars, name=name,
                                                        experimental_aggregate_gradients=aggregate, **kwargs)
        return self.inner_optimizer.apply_gradients(grads_and_vars, name=name,
                                                    skip_gradients_aggregation=skip_gradients_aggregation, **kwargs)

    def apply_gradients(self, grads_and_vars, name=None, skip_gradients_aggregation=False, **kwargs):
        grads_and_vars = list(grads_and_vars)
        grads = [g for g, _ in grads_and_vars]
        variables = [v for _, v in grads_and_vars]
        pending, self._tfring_pending.grads = self._tfring_pending.grads, None
        if not (pending is not None and len(pending) == len(grads) and all(a is b for a, b in zip(pending, grads))):
            grads = self._reduce(grads, variables)
        if self._agg_helper is None:
            return self._inner_apply(list(zip(grads, variables)), name, skip_gradients_aggregation, kwargs)
        with tf.init_scope():
            iterations = self.inner_optimizer.iterations  # an OptimizerV2 creates it on first use
            if not self._is_legacy():
                self.inner_optimizer.build(variables)
        self._agg_helper.apply_or_count(
            lambda: self._inner_apply(list(zip(grads, variables)), name, skip_gradients_aggregation, kwargs),
            iterations)
        return iterations

    def get_config(self):
        op, compression, sparse_as_dense, predivide, passes, average = self._tfring_args
        groups = self._tfring_reducer.groups
        names = {c: n for n, c in _COMPRESSIONS.items()}
        return {"name": self.name, "optimizer": tf_keras.optimizers.serialize(self.inner_optimizer), "op": op,
                "compression": names.get(compression) or {"powersgd": powersgd.settings(compression).get_config()},
                "sparse_as_dense": sparse_as_dense,
                "backward_passes_per_step": passes, "average_aggregated_gradients": average,
                "gradient_predivide_factor": predivide, "groups": groups if isinstance(groups, int) else None,
                "scale_local_gradients": self._tfring_reducer.scale_local_gradients}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = copy.deepcopy(config)  # tf_keras's deserialize edits the nested config (class_name case)
        inner = tf_keras.optimizers.deserialize(config.pop("optimizer"), custom_objects=custom_objects)
        return cls(inner, **config)
