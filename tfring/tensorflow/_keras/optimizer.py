"""DistributedOptimizer for Keras 3: wraps an inner optimizer through public API only (like
keras.optimizers.LossScaleOptimizer) and allreduces gradients in apply() before the inner update."""
import copy
import sys

import keras
from keras import ops

from tfring.common.optimizer_delegation import InnerOptimizerDelegation
from tfring.tensorflow.compression import Compression
from tfring.tensorflow.ops import Average, Sum
from tfring.tensorflow.tape import GradientReducer, local_layer_variables

_COMPRESSIONS = {"none": Compression.none, "fp16": Compression.fp16, "bf16": Compression.bf16}


def _compression_name(c):
    for name, cls in _COMPRESSIONS.items():
        if c is cls:
            return name
    raise ValueError("tfring.keras.DistributedOptimizer: compression=%r is not one of Compression.none/fp16/bf16"
                     % (c,))


def _is_tf_keras_optimizer(optimizer):
    """isinstance against tf_keras's optimizer base classes. An instance of one means tf_keras is imported
    already, so it is never imported here."""
    if "tf_keras" not in sys.modules or isinstance(optimizer, keras.optimizers.Optimizer):
        return False
    from tfring.tensorflow._keras.legacy_optimizer import optimizer_types
    return isinstance(optimizer, optimizer_types())


@keras.saving.register_keras_serializable(package="tfring")
class DistributedOptimizer(InnerOptimizerDelegation, keras.optimizers.Optimizer):
    """Averages (op=Average) or sums (op=Sum) gradients over the ranks of process_set (default: all), then
    applies the inner optimizer.

    A Keras 3 optimizer wrapper built on public API only; `learning_rate` and `iterations` are the inner
    optimizer's. Given a tf_keras optimizer (also a legacy OptimizerV2), the constructor returns the tf_keras
    wrapper (`tfring.tensorflow._keras.legacy_optimizer.LegacyDistributedOptimizer`) instead. On a rank outside
    the set, or in a set of one rank, the gradients are applied unreduced. groups given as variable lists,
    process_set and local variables are not part of get_config().

    Args:
        optimizer: the Keras optimizer that applies the reduced gradients (or its config dict).
        name: the wrapper's name (default "Distributed" + the inner class name).
        op: `Average` (default) or `Sum`.
        compression: `Compression.none`, `.fp16` or `.bf16` (or "none", "fp16", "bf16").
        sparse_as_dense: turn `tf.IndexedSlices` gradients into dense ones before reducing them.
        backward_passes_per_step: k > 1 accumulates k local gradients and communicates once every k steps.
        average_aggregated_gradients: with k > 1, apply the mean of the k gradients instead of their sum.
        gradient_predivide_factor: with Average, divide by this before the sum and by size/this after.
        groups: an int (that many contiguous groups) or lists of variables, one grouped allreduce each.
        device_dense, device_sparse: device for the collectives (GPU builds) / for `tf.IndexedSlices`.
        process_set: the `tfring.ProcessSet` to reduce over (default: all ranks).
        num_groups: deprecated spelling of an int `groups`.
        scale_local_gradients: divide local variables' gradients by the set's size (Horovod's default).
        **kwargs: keras.optimizers.Optimizer's arguments (learning_rate is the inner optimizer's).

    Raises:
        TypeError: `optimizer` is not a Keras optimizer.
        ValueError: op is not Average or Sum, backward_passes_per_step < 1, gradient_predivide_factor without
            Average, an unknown compression, or malformed groups.
    """

    def __new__(cls, optimizer=None, *args, **kwargs):
        # A tf_keras (Keras 2) optimizer, a subclass of one or a legacy OptimizerV2 gets the tf_keras wrapper:
        # one public name for both Keras versions.
        if _is_tf_keras_optimizer(optimizer):
            from tfring.tensorflow._keras.legacy_optimizer import LegacyDistributedOptimizer
            return LegacyDistributedOptimizer(optimizer, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, optimizer, name=None, op=Average, compression=Compression.none, sparse_as_dense=False,
                 backward_passes_per_step=1, average_aggregated_gradients=False, gradient_predivide_factor=1.0,
                 groups=None, device_dense="", device_sparse="", process_set=None, num_groups=0,
                 scale_local_gradients=True, **kwargs):
        if isinstance(optimizer, dict):
            optimizer = keras.optimizers.deserialize(optimizer)
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise TypeError("tfring.keras.DistributedOptimizer: optimizer must be a keras.optimizers.Optimizer, "
                            "got %r" % (optimizer,))
        if op not in (Average, Sum):
            raise ValueError("tfring.keras.DistributedOptimizer: op=%r must be Average or Sum" % (op,))
        if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
            raise ValueError("tfring.keras.DistributedOptimizer: backward_passes_per_step=%r must be an int >= 1"
                             % (backward_passes_per_step,))
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("tfring.keras.DistributedOptimizer: gradient_predivide_factor=%r needs op=Average"
                             % (gradient_predivide_factor,))
        if isinstance(compression, str):
            if compression not in _COMPRESSIONS:
                raise ValueError("tfring.keras.DistributedOptimizer: compression=%r is not one of 'none', 'fp16', "
                                 "'bf16'" % (compression,))
            compression = _COMPRESSIONS[compression]
        _compression_name(compression)
        reducer = GradientReducer("tfring.keras.DistributedOptimizer", op, compression, sparse_as_dense,
                                  gradient_predivide_factor, groups, num_groups, process_set, device_dense,
                                  device_sparse, scale_local_gradients)
        kwargs.pop("learning_rate", None)
        super().__init__(learning_rate=0.0, name=name or "Distributed%s" % type(optimizer).__name__, **kwargs)
        self.inner_optimizer = optimizer
        self.op = op
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.backward_passes_per_step = backward_passes_per_step
        self.average_aggregated_gradients = average_aggregated_gradients
        self.gradient_predivide_factor = gradient_predivide_factor
        self.process_set = process_set
        self._reducer = reducer

    def register_local_var(self, var):
        """Keeps var's gradient local: not reduced over ranks (only scaled, see scale_local_gradients).

        Args:
            var: a trainable variable of the model.
        """
        self._reducer.register_local(var)

    def build(self, var_list):
        self.inner_optimizer.build(var_list)
        if self.backward_passes_per_step > 1:
            self._pass_counter = self.add_variable((), dtype="int64", initializer="zeros", name="pass_counter")
            self._accumulators = [self.add_variable_from_reference(v, name="grad_accumulator") for v in var_list]
        super().build(var_list)

    @property
    def variables(self):
        return self._variables + self.inner_optimizer.variables

    def _reduce(self, grads, variables):
        # Unchanged outside the process set or in a set of one rank: at size 1, bitwise the inner optimizer.
        return self._reducer.reduce(grads, variables)

    def apply(self, grads, trainable_variables=None):
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        variables = list(trainable_variables) if trainable_variables is not None else self._trainable_variables
        if self.backward_passes_per_step == 1:
            self.inner_optimizer.apply(self._reduce(grads, variables), trainable_variables)
            return
        import tensorflow as tf
        for acc, g in zip(self._accumulators, grads):
            if g is not None:
                acc.assign_add(tf.convert_to_tensor(g))
        self._pass_counter.assign_add(1)

        def communicate_and_apply():
            k = float(self.backward_passes_per_step)
            total = [a / k if self.average_aggregated_gradients else ops.convert_to_tensor(a)
                     for a in self._accumulators]
            self.inner_optimizer.apply(self._reduce(total, variables), trainable_variables)
            for a in self._accumulators:
                a.assign(ops.zeros_like(a))
            return ops.convert_to_tensor(True)

        ops.cond(ops.equal(self._pass_counter % self.backward_passes_per_step, 0), communicate_and_apply,
                 lambda: ops.convert_to_tensor(False))

    def finalize_variable_values(self, var_list):
        self.inner_optimizer.finalize_variable_values(var_list)

    def get_config(self):
        return {
            "name": self.name,
            "optimizer": keras.saving.serialize_keras_object(self.inner_optimizer),
            "op": self.op,
            "compression": _compression_name(self.compression),
            "sparse_as_dense": self.sparse_as_dense,
            "backward_passes_per_step": self.backward_passes_per_step,
            "average_aggregated_gradients": self.average_aggregated_gradients,
            "gradient_predivide_factor": self.gradient_predivide_factor,
            "groups": self._reducer.groups if isinstance(self._reducer.groups, int) else None,
            "scale_local_gradients": self._reducer.scale_local_gradients,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = copy.deepcopy(config)
        inner = keras.saving.deserialize_keras_object(config.pop("optimizer"), custom_objects=custom_objects)
        return cls(inner, **config)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                                sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average, groups=None,
                                process_set=None, local_layers=None, scale_local_gradients=True, **kwargs):
    """`DistributedOptimizer` (Keras 3 or tf_keras) that keeps the gradients of `local_layers`' trainable
    variables local.

    Args:
        optimizer, name, device_dense, device_sparse, compression: as for `DistributedOptimizer`.
        sparse_as_dense, gradient_predivide_factor, op, groups, process_set: the same.
        local_layers: a built Keras layer, or a list of them, whose variables stay local.
        scale_local_gradients: divide the local gradients by the set's size (Horovod's default).
        **kwargs: other `DistributedOptimizer` arguments (e.g. backward_passes_per_step).

    Returns:
        The DistributedOptimizer.

    Raises:
        ValueError: a local layer is not a built Keras layer, or other arguments are malformed.
    """
    local_vars = local_layer_variables("tfring.keras.PartialDistributedOptimizer", local_layers)
    opt = DistributedOptimizer(optimizer, name=name, op=op, compression=compression, sparse_as_dense=sparse_as_dense,
                               gradient_predivide_factor=gradient_predivide_factor, groups=groups,
                               device_dense=device_dense, device_sparse=device_sparse, process_set=process_set,
                               scale_local_gradients=scale_local_gradients, **kwargs)
    for v in local_vars:
        opt.register_local_var(v)
    return opt
