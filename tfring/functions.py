"""Helpers built on the collectives: broadcast variables and arbitrary picklable Python objects.

`process_set=None` means every rank (Horovod's global_process_set); root ranks are global ranks."""
import pickle

import numpy as np
import tensorflow as tf

from tfring.basics import rank
from tfring.ops import _normalize_name, allgather, broadcast


def _is_global(process_set):
    if type(process_set) is int and process_set != 0:
        raise ValueError("process_set=%r: pass a tfring.ProcessSet object (ids other than 0 have no size here)"
                         % (process_set,))
    return process_set is None or type(process_set) is int


def process_set_size(process_set):
    """Number of ranks in process_set; None (or 0, the global set's id) means every rank."""
    if _is_global(process_set):
        from tfring.basics import size
        return size()
    n = process_set.size()
    if n is None:
        raise ValueError("process_set=%s is not registered: pass it to tfring.init(process_sets=[...]) or "
                         "tfring.add_process_set() first" % (process_set,))
    return n


def process_set_rank(process_set):
    """This process's rank within process_set (None or 0: the global rank)."""
    if _is_global(process_set):
        return rank()
    return process_set.rank()


def broadcast_variables(variables, root_rank, process_set=None, inplace=False):
    """Assigns root_rank's value to every variable on every rank of process_set. `inplace` is accepted for
    Horovod compatibility: tfring always assigns the broadcast value into the existing variables."""
    variables = list(variables)
    if tf.executing_eagerly():
        # One tf.function so all broadcasts are in flight together (one negotiation, not one per variable).
        _broadcast_group(variables, root_rank, process_set)
    else:
        return tf.group(*[v.assign(broadcast(v, root_rank, name="bcast_" + _normalize_name(v.name),
                                             process_set=process_set))
                          for v in variables])


def _broadcast_group(variables, root_rank, process_set, name="bcast"):
    names = ["%s_%d_%s" % (name, i, _normalize_name(v.name)) for i, v in enumerate(variables)]

    @tf.function(autograph=False)
    def run():
        for v, n in zip(variables, names):
            v.assign(broadcast(v, root_rank, name=n, process_set=process_set))
        return [tf.convert_to_tensor(v) for v in variables]  # read after the assigns (automatic control deps)
    return run() if variables else []


def broadcast_(variables, root_rank, name=None, process_set=None):
    """In-place broadcast: every variable takes root_rank's value; returns the variables' new values."""
    if hasattr(variables, "assign"):
        raise TypeError("tfring.broadcast_: variables must be a list of variables, got the single variable %r; "
                        "pass [variable]" % (variables,))
    variables = list(variables)
    for v in variables:
        if not hasattr(v, "assign"):
            raise TypeError("tfring.broadcast_: variables must be tf.Variable / keras.Variable objects, got %r"
                            % (v,))
    prefix = _normalize_name(name) if name else "broadcast_inplace"
    if tf.executing_eagerly():
        return _broadcast_group(variables, root_rank, process_set, name=prefix)
    values = []
    for i, v in enumerate(variables):
        assign = v.assign(broadcast(v, root_rank, name="%s_%d_%s" % (prefix, i, _normalize_name(v.name)),
                                    process_set=process_set))
        with tf.control_dependencies([assign]):
            values.append(tf.identity(tf.convert_to_tensor(v)))
    return values


def broadcast_global_variables(root_rank, process_set=None):
    """Broadcasts every tf.compat.v1 global variable from root_rank (TF1-style graphs only, as in Horovod:
    eager TF2 code has no global variables; use broadcast_variables(model.variables, root_rank))."""
    if tf.executing_eagerly():
        raise RuntimeError("tfring.broadcast_global_variables() does not support eager execution; use "
                           "tfring.broadcast_variables(<model and optimizer variables>, root_rank) instead")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank, process_set=process_set)


def _to_numpy(value, session):
    if tf.executing_eagerly():
        return value.numpy()
    return (session or tf.compat.v1.get_default_session()).run(value)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=None):
    """Pickles obj on root_rank and returns the same object on every rank of process_set. `session` is for
    TF1-style graphs (default: the default session)."""
    name = name or "broadcast_object"
    if rank() == root_rank:
        payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        length = tf.constant([payload.size], tf.int64)
    else:
        payload, length = None, tf.constant([0], tf.int64)
    length = int(_to_numpy(broadcast(length, root_rank, name=name + "_len", process_set=process_set),
                           session)[0])
    data = tf.constant(payload) if payload is not None else tf.zeros([length], tf.uint8)
    data = _to_numpy(broadcast(data, root_rank, name=name + "_data", process_set=process_set), session)
    if rank() == root_rank:
        return obj
    return pickle.loads(data.tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=None):
    """Returns fn(obj) -> root_rank's obj, like broadcast_object; in a TF1-style graph the broadcast ops are
    built once here (on placeholders) and every call only runs them in `session`."""
    name = name or "broadcast_object_fn"
    if tf.executing_eagerly():
        return lambda obj: broadcast_object(obj, root_rank, name=name, process_set=process_set)
    length_in = tf.compat.v1.placeholder(tf.int64, [1], name=name + "_len_in")
    data_in = tf.compat.v1.placeholder(tf.uint8, [None], name=name + "_data_in")
    length_out = broadcast(length_in, root_rank, name=name + "_len", process_set=process_set)
    data_out = broadcast(data_in, root_rank, name=name + "_data", process_set=process_set)

    def run(obj):
        sess = session or tf.compat.v1.get_default_session()
        root = rank() == root_rank
        payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if root else None
        n = sess.run(length_out, {length_in: [payload.size if root else 0]})[0]
        data = sess.run(data_out, {data_in: payload if root else np.zeros([n], np.uint8)})
        return obj if root else pickle.loads(data.tobytes())
    return run


def allgather_object(obj, session=None, name=None, process_set=None):
    """Returns [obj from each rank of process_set, in rank order] on every rank of the set."""
    name = name or "allgather_object"
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = _to_numpy(allgather(tf.constant([payload.size], tf.int64), name=name + "_len",
                                process_set=process_set), session)
    data = _to_numpy(allgather(tf.constant(payload), name=name + "_data", process_set=process_set), session)
    out, off = [], 0
    for n in sizes:
        out.append(pickle.loads(data[off:off + n].tobytes()))
        off += n
    return out
