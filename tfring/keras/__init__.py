"""tfring for Keras: `import tfring.keras as hvd` is a drop-in for `horovod.tensorflow.keras`.

Everything in `tfring.tensorflow` (init, rank, size, allreduce, DistributedGradientTape, SyncBatchNormalization, ...) is
here too; this module adds the Keras `DistributedOptimizer`, the `callbacks`, `load_model`, and collectives that
take numpy or Keras values. Keras 3 by default; with TF_USE_LEGACY_KERAS=1 (tf_keras, Keras 2) the optimizer,
callbacks and SyncBatchNormalization are tf_keras ones.
"""
import importlib

import keras
import numpy as np
import tensorflow as tf

import tfring.tensorflow as _tfring
from tfring.keras import callbacks  # noqa: F401
from tfring.tensorflow import *  # noqa: F401,F403  init, rank, size, Compression, Average, ...
from tfring.tensorflow._keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer  # noqa: F401


def _to_tensor(value):
    return tf.convert_to_tensor(keras.ops.convert_to_numpy(value) if not tf.is_tensor(value) else value)


def allreduce(value, name=None, average=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
              compression=Compression.none, process_set=None):
    """`tfring.allreduce` of a numpy, Keras or TF value.

    Args:
        value: the value to reduce.
        name: what ranks match the collective by (optional).
        average: deprecated (Horovod): True means `op=Average`, False `op=Sum`.
        op: `Average` (default), `Sum`, `Min`, `Max`, `Product` or `Adasum`.
        prescale_factor, postscale_factor: multiply the input before, the result after the reduction.
        compression: `Compression.none`, `.fp16` or `.bf16`.
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        A tf.Tensor (as Horovod; `np.asarray()` it for numpy).
    """
    return _tfring.allreduce(_to_tensor(value), name=name, average=average, op=op, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, compression=compression, process_set=process_set)


def allgather(value, name=None, process_set=None):
    """`tfring.allgather` of a numpy, Keras or TF value: every rank's value concatenated along dimension 0.

    Args:
        value: the value to gather.
        name: what ranks match the collective by (optional).
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        A tf.Tensor.
    """
    return _tfring.allgather(_to_tensor(value), name=name, process_set=process_set)


def broadcast(value, root_rank, name=None, process_set=None):
    """`tfring.broadcast` of a numpy, Keras or TF value.

    Args:
        value: the value (the same shape on every rank).
        root_rank: the global rank whose value is sent.
        name: what ranks match the collective by (optional).
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        A tf.Tensor: `root_rank`'s value.
    """
    return _tfring.broadcast(_to_tensor(value), root_rank, name=name, process_set=process_set)


def reducescatter(value, name=None, op=Average, process_set=None):
    """`tfring.reducescatter` of a numpy, Keras or TF value: this rank's block of the reduced value.

    Args:
        value: the value (the same shape on every rank, at least 1-D).
        name: what ranks match the collective by (optional).
        op: `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        A tf.Tensor.
    """
    return _tfring.reducescatter(_to_tensor(value), name=name, op=op, process_set=process_set)


def broadcast_global_variables(root_rank, model=None, process_set=None):
    """Broadcasts a model's variables, and its optimizer's once built, from `root_rank`.

    Keras 3 has no global variable collection, so the model is required. In `model.fit` use
    `callbacks.BroadcastGlobalVariablesCallback` instead.

    Args:
        root_rank: the global rank whose values are sent.
        model: the Keras model.
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Raises:
        ValueError: `model` is None.
    """
    if model is None:
        raise ValueError("tfring.keras.broadcast_global_variables: model=None; Keras 3 has no global variables, "
                         "pass model=<your model> (or use BroadcastGlobalVariablesCallback)")
    variables = list(model.variables)
    if getattr(model, "optimizer", None) is not None and model.optimizer.built:
        variables += list(model.optimizer.variables)
    _tfring.broadcast_variables(variables, root_rank, process_set=process_set)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compile=True):
    """`keras.models.load_model` that knows `DistributedOptimizer`: a model saved with one resumes with one.

    With TF_USE_LEGACY_KERAS=1, `tf_keras.models.load_model`.

    Args:
        filepath: the saved model (`.keras`; tf_keras: also `.h5` or a SavedModel directory).
        custom_optimizers: optimizer classes the model's optimizer may be (registered by class name).
        custom_objects: other custom classes or functions, as for `keras.models.load_model`.
        compile: compile the model (with its optimizer) after loading.

    Returns:
        The model.
    """
    objects = {"DistributedOptimizer": DistributedOptimizer, "tfring>DistributedOptimizer": DistributedOptimizer}
    objects.update(custom_objects or {})
    for opt in custom_optimizers or []:
        objects[opt.__name__] = opt
    if _legacy_keras():
        import tf_keras
        from tfring.tensorflow._keras.legacy_optimizer import LegacyDistributedOptimizer
        objects["LegacyDistributedOptimizer"] = LegacyDistributedOptimizer
        return tf_keras.models.load_model(filepath, custom_objects=objects, compile=compile)
    return keras.models.load_model(filepath, custom_objects=objects, compile=compile)


def _legacy_keras():
    import os
    return os.environ.get("TF_USE_LEGACY_KERAS", "0").lower() in ("1", "true")

# hvd.elastic.KerasState, as horovod.tensorflow.keras (the star import bound tfring.tensorflow.elastic to the name)
elastic = importlib.import_module("tfring.keras.elastic")
