"""jit_compile="auto" must never fail because of tfring (issue #28).

With the TensorFlow backend Keras 3 resolves jit_compile="auto" to True as soon as a non-CPU device is present
(keras/src/trainers/trainer.py, `_resolve_auto_jit_compile`). tfring's collectives lower to XLA only where the op
library has FFI handlers for the device: always on CPU ("Host"), on a GPU only in NCCL builds ("CUDA" handlers,
never run on a GPU). A step compiled for a device without them fails in fit; there the model falls back to
jit_compile=False with one warning.

Keras keeps only the resolved value (compile() stores True for "auto"), and on the TensorFlow backend it calls the
optimizer for the first time inside the compiled step, too late to change how that step is compiled. So the
fallback runs from `JitCompileFallback.on_train_begin`: after fit made its train function and before the first
step runs it (fit reads `model.train_function` at every step, so the function made again here is the one used).
"""
import ctypes
import warnings

import keras

_warned = False


def decide(requested, device_types, served_device_types):
    """Whether a model's train step should be XLA-compiled, and why not when tfring makes it fall back.

    Args:
        requested: the user's jit_compile: True, False or "auto".
        device_types: the device types present (tf.config.list_physical_devices(): "CPU", "GPU", ...).
        served_device_types: those for which tfring's XLA lowering has handlers (see served_device_types()).

    Returns:
        (jit_compile, warning): warning is None unless "auto" fell back because of tfring. An explicit True stays
        True, as asked, even where tfring cannot serve it.
    """
    if requested is True or requested is False:
        return requested, None
    if requested != "auto":
        raise ValueError("jit_compile=%r: expected True, False or 'auto'" % (requested,))
    accelerators = sorted({d for d in device_types if d != "CPU"})
    if not accelerators:  # Keras' own rule: no XLA on CPU-only machines
        return False, None
    missing = [d for d in accelerators if d not in served_device_types]
    if not missing:
        return True, None
    return False, ("tfring: jit_compile='auto' would XLA-compile the train step for %s, but this tfring build has no "
                   "XLA lowering of its collectives there (only %s): training without XLA (jit_compile=False). "
                   "Rebuild tfring with TFRING_GPU_OPERATIONS=NCCL for the GPU lowering, or pass jit_compile=False "
                   "to silence this." % ("/".join(missing), "/".join(sorted(served_device_types)) or "none"))


def served_device_types():
    """Device types tfring's XLA lowering serves in this process: CPU always; GPU when TensorFlow's XLA accepted
    the op library's "CUDA" handlers (exported by NCCL builds only)."""
    from tfring.common import library
    from tfring.tensorflow import _library
    _library.load()
    served = {"CPU"}
    lib = ctypes.CDLL(library.find_extension("tensorflow", _library._PATTERN))
    registration = getattr(lib, "tfring_xla_cuda_registration", None)
    if registration is not None:
        registration.restype = ctypes.c_char_p
        if registration() == b"":
            served.add("GPU")
    return served


def present_device_types():
    """The device types of this process ("CPU", "GPU", ...)."""
    import tensorflow as tf
    return {d.device_type for d in tf.config.list_physical_devices()}


def fall_back(model, requested="auto", device_types=None, served=None):
    """Turns a compiled Keras model's jit_compile off (public setter, train function made again) when decide()
    says so, warning once per process. Returns the model's jit_compile afterwards.

    requested is what the user asked; Keras keeps only the resolved value, so a resolved True counts as "auto".
    device_types and served default to this process's (tests pass their own)."""
    global _warned
    if not model.jit_compile:
        return False
    if device_types is None:
        device_types = present_device_types()
    value, why = decide(requested, device_types, served_device_types() if served is None else served)
    if value:
        return True
    model.jit_compile = False
    model.make_train_function(force=True)
    if why and not _warned:
        _warned = True
        warnings.warn(why, stacklevel=2)
    return False


class JitCompileFallback(keras.callbacks.Callback):
    """Applies fall_back() to the model at the start of fit, before its first step is compiled."""

    def __init__(self, requested="auto", device_types=None, served=None):
        super().__init__()
        self._args = (requested, device_types, served)

    def on_train_begin(self, logs=None):
        fall_back(self.model, *self._args)


def fall_back_if_unserved(model):
    """What `BroadcastGlobalVariablesCallback` runs at the start of fit, so a Horovod recipe needs nothing more:
    falls back (as fall_back) only where an accelerator is present that the lowering does not serve; a compiled
    step on a CPU-only machine, or on a served GPU, stays as the user compiled it.

    Args:
        model: a compiled Keras 3 model.

    Returns:
        bool: the model's jit_compile afterwards.
    """
    if not getattr(model, "jit_compile", False):
        return False
    devices = present_device_types()
    if devices <= {"CPU"}:
        return True
    served = served_device_types()
    if decide("auto", devices, served)[1] is None:
        return True
    return fall_back(model, "auto", devices, served)
