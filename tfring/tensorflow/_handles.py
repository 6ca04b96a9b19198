"""tfring.tensorflow's door to the core: the op library, and what every collective module (_reduce, _gather,
_reducescatter) checks, names and documents the same way."""
import contextlib
import re

import tensorflow as tf

from tfring.common.docstrings import fill_docs
from tfring.common.process_sets import process_set_id_of, process_set_of
from tfring.tensorflow import _library

NUMERIC = (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
           tf.float64)
ANY = NUMERIC + (tf.bool,)

# The arguments the collectives share, each worded once: a docstring line "{block}" takes the block
# (`@shared_docs`), so help() shows the same words for the same argument everywhere.
shared_docs = fill_docs({
    "collective_args": "name: what ranks match the collective by (default: from the input in graphs, the op type "
                       "eagerly).\n"
                       "process_set: the `tfring.ProcessSet` to run on (default: all ranks); only its ranks call it.\n"
                       "ignore_name_scope: in a graph, leave the enclosing name scopes out of the negotiated name.",
    "reduce_args": "average: deprecated (Horovod): True means `op=Average`, False `op=Sum`.\n"
                   "device_dense, device_sparse: device for the collective (GPU builds) / for `tf.IndexedSlices`' "
                   "allgathers.\n"
                   "compression: `Compression.none`, `.fp16` or `.bf16`: the dtype floating tensors travel in.\n"
                   "op: `Average` (default), `Sum`, `Min`, `Max`, `Product` or `Adasum` (power-of-two sets only).\n"
                   "prescale_factor, postscale_factor: multiply the input before, the result after the reduction.",
})


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


def convert_group(fn, tensors, allowed):
    """A grouped collective's tensors as tensors, each dtype checked against `allowed`."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    for t in tensors:
        check_dtype(fn, t, allowed)
    return tensors


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
