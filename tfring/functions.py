"""Helpers built on the collectives: broadcast variables and arbitrary picklable Python objects."""
import io
import pickle

import numpy as np
import tensorflow as tf

from tfring.basics import rank
from tfring.ops import _normalize_name, allgather, broadcast


def broadcast_variables(variables, root_rank):
    """Assigns root_rank's value to every variable on every rank."""
    variables = list(variables)
    if tf.executing_eagerly():
        # One tf.function so all broadcasts are in flight together (one negotiation, not one per variable).
        _broadcast_group(variables, root_rank)
    else:
        return tf.group(*[v.assign(broadcast(v, root_rank, name="bcast_" + _normalize_name(v.name)))
                          for v in variables])


def _broadcast_group(variables, root_rank):
    names = ["bcast_%d_%s" % (i, _normalize_name(v.name)) for i, v in enumerate(variables)]

    @tf.function(autograph=False)
    def run():
        for v, n in zip(variables, names):
            v.assign(broadcast(v, root_rank, name=n))
    if variables:
        run()


def broadcast_object(obj, root_rank=0, name=None):
    """Pickles obj on root_rank and returns the same object on every rank."""
    name = name or "broadcast_object"
    if rank() == root_rank:
        buf = io.BytesIO()
        pickle.dump(obj, buf)
        payload = np.frombuffer(buf.getvalue(), dtype=np.uint8)
        length = tf.constant([payload.size], tf.int64)
    else:
        payload, length = None, tf.constant([0], tf.int64)
    length = int(broadcast(length, root_rank, name=name + "_len").numpy()[0])
    data = tf.constant(payload) if payload is not None else tf.zeros([length], tf.uint8)
    data = broadcast(data, root_rank, name=name + "_data")
    if rank() == root_rank:
        return obj
    return pickle.loads(data.numpy().tobytes())


def allgather_object(obj, name=None):
    """Returns [obj from rank 0, obj from rank 1, ...] on every rank."""
    name = name or "allgather_object"
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = allgather(tf.constant([payload.size], tf.int64), name=name + "_len").numpy()
    data = allgather(tf.constant(payload), name=name + "_data").numpy()
    out, off = [], 0
    for n in sizes:
        out.append(pickle.loads(data[off:off + n].tobytes()))
        off += n
    return out
