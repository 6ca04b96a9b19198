"""The Keras backend in use and tfring's glue for it. `_tf.py`, `_jax.py` and `_torch.py` each give the same few
functions (the backend's collectives on Keras values, variable broadcast, the gradient reducer, state sync);
the rest of tfring.keras and the callbacks are backend-free. Only the active backend's glue, binding and
framework are imported."""
import os

import keras


def legacy_keras():
    """Whether tf_keras (Keras 2) is in use: TF_USE_LEGACY_KERAS=1, as TensorFlow reads it.

    Returns:
        bool
    """
    return os.environ.get("TF_USE_LEGACY_KERAS", "0").lower() in ("1", "true")


def name():
    """The backend tfring.keras serves: "tensorflow" (also for tf_keras), "jax" or "torch".

    Returns:
        str
    """
    return "tensorflow" if legacy_keras() else keras.backend.backend()


def glue():
    """The active backend's glue module.

    Returns:
        module: tfring.keras._backend._tf, _jax or _torch.

    Raises:
        NotImplementedError: a Keras backend tfring has no binding for (numpy, openvino).
    """
    backend = name()
    if backend == "tensorflow":
        from tfring.keras._backend import _tf as module
    elif backend == "jax":
        from tfring.keras._backend import _jax as module
    elif backend == "torch":
        from tfring.keras._backend import _torch as module
    else:
        raise NotImplementedError("tfring.keras: the Keras backend %r has no tfring binding; use KERAS_BACKEND="
                                  "tensorflow, jax or torch" % (backend,))
    return module
