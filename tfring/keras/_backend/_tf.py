"""tfring.keras on the TensorFlow backend (and tf_keras): the TensorFlow binding's ops."""
import keras
import numpy as np
import tensorflow as tf

import tfring.tensorflow as binding  # noqa: F401 (the backend's binding, read by tfring.keras)
from tfring.tensorflow.compression import Compression  # noqa: F401
from tfring.tensorflow.tape import GradientReducer, layer_types, var_key  # noqa: F401
from tfring.tensorflow.tf_keras import is_tf_keras_optimizer

EXPORTS_WHOLE_BINDING = True  # tfring.keras re-exports every name of the binding (as Horovod), else the shared ones


def tf_keras_wrapper(optimizer):
    """The tf_keras wrapper class for a tf_keras (Keras 2) optimizer or legacy OptimizerV2, else None."""
    if isinstance(optimizer, keras.optimizers.Optimizer) or not is_tf_keras_optimizer(optimizer):
        return None
    from tfring.tensorflow.tf_keras.optimizer import LegacyDistributedOptimizer
    return LegacyDistributedOptimizer


def dense(grad):
    """A gradient as a dense tensor (`tf.IndexedSlices` densified), for accumulation."""
    return tf.convert_to_tensor(grad)


def on_kth_pass(update, total, reduce, apply, kept, accumulators, skip=None):
    """backward_passes_per_step: on the pass where `update` holds, reduce the accumulated gradients, apply them
    and zero the accumulators; a graph branch (tf.cond), so the other passes neither communicate nor update."""
    def communicate_and_apply():
        apply(reduce(total()))
        for a in accumulators:
            a.assign(tf.zeros_like(a.value))
        return tf.constant(True)

    tf.cond(update, communicate_and_apply, lambda: tf.constant(False))


def to_native(value):
    """A numpy, Keras or TF value as a tf.Tensor."""
    return value if tf.is_tensor(value) else tf.convert_to_tensor(keras.ops.convert_to_numpy(value))


def allreduce_numpy(values, op, name, process_set):
    """Reduces a numpy array over the ranks; returns numpy."""
    return binding.allreduce(tf.constant(values), op=op, name=name, process_set=process_set).numpy()


def broadcast_variables(variables, root_rank, process_set):
    """Assigns root_rank's values to the variables (Keras 3 or tf_keras, or tf.Variables)."""
    binding.broadcast_variables(list(variables), root_rank, process_set=process_set)


def before_fit(model):
    """Keras 3 compiled for an accelerator the XLA lowering does not serve: trains without XLA (one warning)."""
    if not isinstance(model, keras.Model):  # tf_keras: no XLA default
        return
    from tfring.keras._backend._tf_jit_fallback import fall_back_if_unserved
    fall_back_if_unserved(model)


def sync_model_state(model):
    """TensorFlow keeps the state in the variables: nothing to do."""


def is_variable(value):
    """Whether value is a variable of this backend."""
    return isinstance(value, (tf.Variable, keras.Variable)) or isinstance(getattr(value, "_value", None), tf.Variable)


def as_numpy(value):
    """A value as numpy."""
    return np.asarray(value)
