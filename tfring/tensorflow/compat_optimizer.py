"""tfring.DistributedOptimizer (Horovod's horovod.tensorflow.DistributedOptimizer): wraps a
tf.compat.v1.train.Optimizer for graph-mode (tf.compat.v1.Session) training; given a Keras optimizer it returns
tfring.keras.DistributedOptimizer."""
import tensorflow as tf

from tfring.tensorflow.compression import Compression
from tfring.common.reduce_ops import Average
from tfring.tensorflow.tape import GradientReducer

WHO = "tfring.DistributedOptimizer"


class _DistributedOptimizer(tf.compat.v1.train.Optimizer):
    """compute_gradients() reduces the inner optimizer's gradients over the ranks of the process set (a rank
    outside the set, or a set of one rank, keeps its own); apply_gradients() and the rest delegate.

    Args:
        optimizer: the inner tf.compat.v1.train.Optimizer.
        name, use_locking: for tf.compat.v1.train.Optimizer.
        reducer: the `tfring.tensorflow.tape.GradientReducer`.
    """

    def __init__(self, optimizer, name, use_locking, reducer):
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer  # Horovod's attribute name
        self._tfring_reducer = reducer

    def register_local_var(self, var):
        """var's gradient is not reduced over ranks (only scaled, see scale_local_gradients)."""
        self._tfring_reducer.register_local(var)

    def compute_gradients(self, *args, **kwargs):
        """The inner optimizer's compute_gradients(), with the gradients reduced (tfring.grouped_allreduce)."""
        grads_and_vars = list(self._optimizer.compute_gradients(*args, **kwargs))
        if not grads_and_vars:
            return grads_and_vars
        grads = [g for g, _ in grads_and_vars]
        variables = [v for _, v in grads_and_vars]
        with tf.name_scope(self.get_name() + "_Allreduce"):
            reduced = self._tfring_reducer.reduce(grads, variables)
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=None, scale_local_gradients=True, sharded=False):
    """Horovod's `horovod.tensorflow.DistributedOptimizer`: gradients reduced over the ranks of `process_set`.

    A `tf.compat.v1.train.Optimizer` (TF1-style graphs) gets a wrapper whose `compute_gradients()`, and so
    `minimize()`, reduces the gradients; `register_local_var(var)` keeps a variable's gradient local. A Keras
    optimizer (Keras 3 or tf_keras) gets `tfring.keras.DistributedOptimizer` (`use_locking` is ignored there).

    Args:
        optimizer: a `tf.compat.v1.train.Optimizer` or a Keras optimizer.
        name: the wrapper's name (default "Distributed" + the inner class name).
        use_locking: passed to `tf.compat.v1.train.Optimizer`.
        device_dense, device_sparse: device for the collectives (GPU builds) / for `tf.IndexedSlices`.
        compression: `Compression.none`, `.fp16` or `.bf16`.
        sparse_as_dense: turn `tf.IndexedSlices` gradients into dense ones before reducing them.
        backward_passes_per_step: passes whose gradients are accumulated per communication (Keras only; 1 for
            a tf.compat.v1 optimizer).
        op: `Average` (default), `Sum` (or `Adasum` for a tf.compat.v1 optimizer).
        gradient_predivide_factor: with Average, divide by this before the sum and by size/this after.
        average_aggregated_gradients: Keras, with backward_passes_per_step > 1: average the passes' gradients
            instead of summing them.
        num_groups: deprecated spelling of an int `groups`.
        groups: an int (that many contiguous groups) or lists of variables, one grouped allreduce each.
        process_set: the `tfring.ProcessSet` to reduce over (default: all ranks).
        scale_local_gradients: divide local variables' gradients by the set's size (Horovod's default).
        sharded: a Keras optimizer only: ZeRO stage 1 or 2 (`tfring.keras.DistributedOptimizer`'s `sharded`),
            also in a custom `tf.GradientTape` loop — with a plain tape: the optimizer reduce-scatters the
            gradients itself (docs/sharded-optimizer.md).

    Returns:
        The wrapping optimizer.

    Raises:
        NotImplementedError: backward_passes_per_step != 1 with a tf.compat.v1 optimizer.
        TypeError: `optimizer` is neither kind.
        ValueError: malformed arguments (see `tfring.keras.DistributedOptimizer`).
    """
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if sharded:
            raise ValueError("%s: sharded=%r needs a Keras optimizer (tf.keras.optimizers / keras.optimizers); a "
                             "tf.compat.v1.train.Optimizer's state is not sharded" % (WHO, sharded))
        if backward_passes_per_step != 1:
            raise NotImplementedError("%s: backward_passes_per_step=%r is not supported with a "
                                      "tf.compat.v1.train.Optimizer; use 1 (or a Keras optimizer)"
                                      % (WHO, backward_passes_per_step))
        reducer = GradientReducer(WHO, op, compression, sparse_as_dense, gradient_predivide_factor, groups,
                                  num_groups, process_set, device_dense, device_sparse, scale_local_gradients)
        return _DistributedOptimizer(optimizer, name or "Distributed%s" % type(optimizer).__name__, use_locking,
                                     reducer)
    import keras
    import importlib

    from tfring.tensorflow.tf_keras import is_tf_keras_optimizer
    if not isinstance(optimizer, keras.optimizers.Optimizer) and not is_tf_keras_optimizer(optimizer):
        raise TypeError("%s: optimizer must be a tf.compat.v1.train.Optimizer or a Keras optimizer, got %r"
                        % (WHO, optimizer))
    # Horovod's horovod.tensorflow.DistributedOptimizer hands Keras optimizers to its Keras layer too: the one
    # Keras DistributedOptimizer (tfring.keras, which returns the tf_keras wrapper for a tf_keras optimizer) is
    # reached by name, as `import tfring` reaches tfring.tensorflow, since a binding imports no layer above it.
    KerasDistributedOptimizer = importlib.import_module("tfring.keras.optimizer").DistributedOptimizer
    return KerasDistributedOptimizer(
        optimizer, name=name, op=op, compression=compression, sparse_as_dense=sparse_as_dense,
        backward_passes_per_step=backward_passes_per_step, average_aggregated_gradients=average_aggregated_gradients,
        gradient_predivide_factor=gradient_predivide_factor, groups=groups, num_groups=num_groups,
        device_dense=device_dense, device_sparse=device_sparse, process_set=process_set,
        scale_local_gradients=scale_local_gradients, **({"sharded": sharded} if sharded else {}))
