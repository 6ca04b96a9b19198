"""What the JAX and torch glue share: no tf_keras, dense gradients, Keras 3's layers only."""
import keras

var_key = id  # Keras 3 variables of these backends are plain objects
EXPORTS_WHOLE_BINDING = False  # tfring.keras re-exports the names every binding shares, not the whole binding


def tf_keras_wrapper(optimizer):
    """tf_keras exists only on the TensorFlow backend."""
    return None


def dense(grad):
    """Gradients are dense on this backend."""
    return grad


def layer_types():
    """The Keras layer base class."""
    return (keras.layers.Layer,)
