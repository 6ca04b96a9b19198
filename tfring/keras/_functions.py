"""tfring.keras's functions of Keras and numpy values, on the active backend's binding: the collectives (they
return the backend's tensors, as Horovod's returned TF tensors), `broadcast_global_variables` and `load_model`."""
import keras

from tfring.common.reduce_ops import Average
from tfring.keras._backend import glue, legacy_keras


def allreduce(value, name=None, average=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
              compression=None, process_set=None):
    """Allreduce of a numpy, Keras or backend value.

    Args:
        value: the value to reduce.
        name: what ranks match the collective by (optional).
        average: deprecated (Horovod): True means `op=Average`, False `op=Sum`.
        op: `Average` (default), `Sum`, `Min`, `Max`, `Product` (TensorFlow: also `Adasum`).
        prescale_factor, postscale_factor: multiply the input before, the result after the reduction.
        compression: `Compression.none` (default), `.fp16` or `.bf16`.
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        The backend's tensor (tf.Tensor, jax.Array or torch.Tensor; `np.asarray()` it for numpy).
    """
    g = glue()
    kwargs = dict(name=name, average=average, op=op, prescale_factor=prescale_factor,
                  postscale_factor=postscale_factor, compression=compression or g.Compression.none)
    if process_set is not None:
        kwargs["process_set"] = process_set
    return g.binding.allreduce(g.to_native(value), **kwargs)


def allgather(value, name=None, process_set=None):
    """Allgather of a numpy, Keras or backend value: every rank's value concatenated along dimension 0.

    Args:
        value: the value to gather.
        name: what ranks match the collective by (optional).
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        The backend's tensor.
    """
    g = glue()
    return g.binding.allgather(g.to_native(value), name=name, **_set(process_set))


def broadcast(value, root_rank, name=None, process_set=None):
    """Broadcast of a numpy, Keras or backend value.

    Args:
        value: the value (the same shape on every rank).
        root_rank: the global rank whose value is sent.
        name: what ranks match the collective by (optional).
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        The backend's tensor: `root_rank`'s value.
    """
    g = glue()
    return g.binding.broadcast(g.to_native(value), root_rank, name=name, **_set(process_set))


def reducescatter(value, name=None, op=Average, process_set=None):
    """Reducescatter of a numpy, Keras or backend value: this rank's block of the reduced value.

    Args:
        value: the value (the same shape on every rank, at least 1-D).
        name: what ranks match the collective by (optional).
        op: `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        The backend's tensor.
    """
    g = glue()
    return g.binding.reducescatter(g.to_native(value), name=name, op=op, **_set(process_set))


def _set(process_set):
    return {} if process_set is None else {"process_set": process_set}


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
    g = glue()
    g.sync_model_state(model)
    variables = list(model.variables)
    if getattr(model, "optimizer", None) is not None and model.optimizer.built:
        variables += list(model.optimizer.variables)
    g.broadcast_variables(variables, root_rank, process_set)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compile=True):
    """`keras.models.load_model` that knows `DistributedOptimizer`: a model saved with one resumes with one (on
    any backend, whichever backend saved it).

    With TF_USE_LEGACY_KERAS=1, `tf_keras.models.load_model`.

    Args:
        filepath: the saved model (`.keras`; tf_keras: also `.h5` or a SavedModel directory).
        custom_optimizers: optimizer classes the model's optimizer may be (registered by class name).
        custom_objects: other custom classes or functions, as for `keras.models.load_model`.
        compile: compile the model (with its optimizer) after loading.

    Returns:
        The model.
    """
    from tfring.keras.optimizer import DistributedOptimizer
    from tfring.keras.sync_batch_norm import SyncBatchNormalization
    objects = {"DistributedOptimizer": DistributedOptimizer, "SyncBatchNormalization": SyncBatchNormalization}
    objects.update(custom_objects or {})
    for opt in custom_optimizers or []:
        objects[opt.__name__] = opt
    if legacy_keras():
        import tf_keras
        from tfring.tensorflow.tf_keras.optimizer import LegacyDistributedOptimizer
        objects["LegacyDistributedOptimizer"] = LegacyDistributedOptimizer
        return tf_keras.models.load_model(filepath, custom_objects=objects, compile=compile)
    return keras.models.load_model(filepath, custom_objects=objects, compile=compile)
