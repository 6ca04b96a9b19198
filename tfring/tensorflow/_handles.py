"""tfring.tensorflow's door to the core: the op library, and what every collective module (_reduce, _gather,
_reducescatter) checks and names the same way."""
import contextlib
import re

import tensorflow as tf

from tfring.common.process_sets import process_set_id_of, process_set_of
from tfring.tensorflow import _library

NUMERIC = (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
           tf.float64)
ANY = NUMERIC + (tf.bool,)


def ops():
    return _library.load()


def normalize_name(name):
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def names(prefix, tensor, name):
    """Keyword args naming the collective. Graph mode: the node name (derived from the input when not
    given, identical on every rank). Eager mode: TF names every kernel by its op type, so a given name
    travels in the tensor_name attr; unnamed eager ops share the op type name (one in flight per thread)."""
    if tf.executing_eagerly():
        return {"tensor_name": name or ""}
    if name is None:
        name = "%s_%s" % (prefix, normalize_name(tensor.name))
    return {"name": name}


def require_init(fn):
    """Eager calls fail in Python with a plain message; graph-mode calls fail in the kernel."""
    if tf.executing_eagerly():
        from tfring.common.basics import is_initialized
        if not is_initialized():
            raise ValueError("tfring.%s: tfring has not been initialized (or was shut down); call tfring.init() "
                             "first" % fn)


def check_dtype(fn, tensor, allowed):
    require_init(fn)
    if tensor.dtype not in allowed:
        raise TypeError("tfring.%s: tensor dtype %s is not supported; supported: %s"
                        % (fn, tensor.dtype.name, ", ".join(d.name for d in allowed)))


def set_id(fn, process_set):
    """process_set_id attr of a `process_set=` argument; ValueError if it names no registered set."""
    return process_set_id_of(process_set, fn)


def set_size(process_set_id):
    return process_set_of(process_set_id).size()


def set_rank(process_set_id):
    return process_set_of(process_set_id).rank()


def on(device):
    """Horovod's device_dense/device_sparse: place the collective there (GPU builds run it on that GPU)."""
    return tf.device(device) if device else contextlib.nullcontext()
