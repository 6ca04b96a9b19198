"""tfring.keras on the TensorFlow backend (and tf_keras): the TensorFlow binding's ops."""
import keras
import numpy as np
import tensorflow as tf

import tfring.tensorflow as binding  # noqa: F401 (the backend's binding, read by tfring.keras)
from tfring.tensorflow.compression import Compression  # noqa: F401
from tfring.tensorflow.tape import GradientReducer, var_key  # noqa: F401


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
    from tfring.tensorflow._keras.jit_fallback import fall_back_if_unserved
    fall_back_if_unserved(model)


def sync_model_state(model):
    """TensorFlow keeps the state in the variables: nothing to do."""


def is_variable(value):
    """Whether value is a variable of this backend."""
    return isinstance(value, (tf.Variable, keras.Variable)) or isinstance(getattr(value, "_value", None), tf.Variable)


def as_numpy(value):
    """A value as numpy."""
    return np.asarray(value)
