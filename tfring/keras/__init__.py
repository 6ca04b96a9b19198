"""tfring for Keras 3: `import tfring.keras as hvd` is a drop-in for `horovod.tensorflow.keras`."""
import keras
import numpy as np
import tensorflow as tf

import tfring as _tfring
from tfring import *  # noqa: F401,F403  init, rank, size, Compression, Average, ...
from tfring.keras import callbacks  # noqa: F401
from tfring.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer  # noqa: F401


def _to_tensor(value):
    return tf.convert_to_tensor(keras.ops.convert_to_numpy(value) if not tf.is_tensor(value) else value)


def allreduce(value, name=None, average=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
              compression=Compression.none, process_set=None):
    """Allreduce of a numpy, Keras or TF value; returns a tensor (as Horovod: np.asarray() it for numpy)."""
    return _tfring.allreduce(_to_tensor(value), name=name, average=average, op=op, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, compression=compression, process_set=process_set)


def allgather(value, name=None, process_set=None):
    return _tfring.allgather(_to_tensor(value), name=name, process_set=process_set)


def broadcast(value, root_rank, name=None, process_set=None):
    return _tfring.broadcast(_to_tensor(value), root_rank, name=name, process_set=process_set)


def reducescatter(value, name=None, op=Average, process_set=None):
    return _tfring.reducescatter(_to_tensor(value), name=name, op=op, process_set=process_set)


def broadcast_global_variables(root_rank, model=None, process_set=None):
    """Broadcasts a model's (and its built optimizer's) variables from root_rank. Keras 3 has no global
    variable collection, so the model is required."""
    if model is None:
        raise ValueError("tfring.keras.broadcast_global_variables: model=None; Keras 3 has no global variables, "
                         "pass model=<your model> (or use BroadcastGlobalVariablesCallback)")
    variables = list(model.variables)
    if getattr(model, "optimizer", None) is not None and model.optimizer.built:
        variables += list(model.optimizer.variables)
    _tfring.broadcast_variables(variables, root_rank, process_set=process_set)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compile=True):
    """keras.models.load_model that knows DistributedOptimizer: a model saved with one resumes with one."""
    objects = {"DistributedOptimizer": DistributedOptimizer, "tfring>DistributedOptimizer": DistributedOptimizer}
    objects.update(custom_objects or {})
    for opt in custom_optimizers or []:
        objects[opt.__name__] = opt
    if _legacy_keras():
        import tf_keras
        from tfring.keras.legacy_optimizer import LegacyDistributedOptimizer
        objects["LegacyDistributedOptimizer"] = LegacyDistributedOptimizer
        return tf_keras.models.load_model(filepath, custom_objects=objects, compile=compile)
    return keras.models.load_model(filepath, custom_objects=objects, compile=compile)


def _legacy_keras():
    import os
    return os.environ.get("TF_USE_LEGACY_KERAS", "0").lower() in ("1", "true")
