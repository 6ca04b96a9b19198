"""Helpers built on the collectives: broadcast variables and arbitrary Python objects.

Objects are serialised with cloudpickle (lambdas, closures and classes defined in __main__ travel too, as in
Horovod) and read back with the standard unpickler. `process_set=None` means every rank (Horovod's
global_process_set); root ranks are global ranks."""


import tensorflow as tf

from tfring.common import object_collectives
from tfring.common.basics import rank
from tfring.tensorflow._gather import allgather, broadcast
from tfring.tensorflow._handles import normalize_name


def broadcast_variables(variables, root_rank, process_set=None, inplace=False):
    """Assigns `root_rank`'s values to the variables on every rank of the set.

    Eagerly, all broadcasts run at once (one tf.function); in a TF1-style graph it returns the op to run.

    Args:
        variables: tf.Variable or keras.Variable objects, the same list on every rank.
        root_rank: the global rank whose values are sent.
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.
        inplace: accepted for Horovod compatibility; the values are always assigned into the variables.

    Returns:
        None eagerly; in a graph, the op that broadcasts and assigns.
    """
    variables = list(variables)
    if tf.executing_eagerly():
        # One tf.function so all broadcasts are in flight together (one negotiation, not one per variable).
        _broadcast_group(variables, root_rank, process_set)
    else:
        return tf.group(*[v.assign(broadcast(v, root_rank, name="bcast_" + normalize_name(v.name),
                                             process_set=process_set))
                          for v in variables])


def _broadcast_group(variables, root_rank, process_set, name="bcast"):
    names = ["%s_%d_%s" % (name, i, normalize_name(v.name)) for i, v in enumerate(variables)]

    @tf.function(autograph=False)
    def run():
        for v, n in zip(variables, names):
            v.assign(broadcast(v, root_rank, name=n, process_set=process_set))
        return [tf.convert_to_tensor(v) for v in variables]  # read after the assigns (automatic control deps)
    return run() if variables else []


def broadcast_(variables, root_rank, name=None, process_set=None):
    """In-place broadcast: every variable takes `root_rank`'s value.

    Args:
        variables: a list of tf.Variable or keras.Variable objects, the same on every rank.
        root_rank: the global rank whose values are sent.
        name: prefix of the collectives' names (default "broadcast_inplace").
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        list: the variables' new values (tensors).

    Raises:
        TypeError: `variables` is a single variable, or holds something that is not a variable.
    """
    if hasattr(variables, "assign"):
        raise TypeError("tfring.broadcast_: variables must be a list of variables, got the single variable %r; "
                        "pass [variable]" % (variables,))
    variables = list(variables)
    for v in variables:
        if not hasattr(v, "assign"):
            raise TypeError("tfring.broadcast_: variables must be tf.Variable / keras.Variable objects, got %r"
                            % (v,))
    prefix = normalize_name(name) if name else "broadcast_inplace"
    if tf.executing_eagerly():
        return _broadcast_group(variables, root_rank, process_set, name=prefix)
    values = []
    for i, v in enumerate(variables):
        assign = v.assign(broadcast(v, root_rank, name="%s_%d_%s" % (prefix, i, normalize_name(v.name)),
                                    process_set=process_set))
        with tf.control_dependencies([assign]):
            values.append(tf.identity(tf.convert_to_tensor(v)))
    return values


def broadcast_global_variables(root_rank, process_set=None):
    """Broadcasts every tf.compat.v1 global variable from `root_rank`, for TF1-style graphs.

    Eager TF2 code has no global variables: use `broadcast_variables(model.variables, root_rank)`, or for Keras
    `tfring.keras.broadcast_global_variables(root_rank, model=...)` or `BroadcastGlobalVariablesCallback`.

    Args:
        root_rank: the global rank whose values are sent.
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        The op that broadcasts and assigns (run it in the session).

    Raises:
        RuntimeError: called eagerly.
    """
    if tf.executing_eagerly():
        raise RuntimeError("tfring.broadcast_global_variables() does not support eager execution; use "
                           "tfring.broadcast_variables(<model and optimizer variables>, root_rank) instead")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank, process_set=process_set)


def _to_numpy(value, session):
    if tf.executing_eagerly():
        return value.numpy()
    return (session or tf.compat.v1.get_default_session()).run(value)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=None):
    """Sends a Python object from `root_rank` to every rank of the set.

    The object is serialized with cloudpickle, so lambdas and classes defined in `__main__` travel too.

    Args:
        obj: the object (only `root_rank`'s is used; the others may pass None).
        root_rank: the global rank whose object is sent.
        session: TF1-style graphs: the session to run the broadcasts in (default: the default session).
        name: prefix of the collectives' names (default "broadcast_object").
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        `root_rank`'s object (on `root_rank`, `obj` itself).
    """
    return object_collectives.broadcast_object(
        obj, root_rank, rank(), lambda a, n: _to_numpy(broadcast(tf.constant(a), root_rank, name=n,
                                                                 process_set=process_set), session),
        name or "broadcast_object")


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=None):
    """A function `fn(obj)` that returns `root_rank`'s object, as `broadcast_object` does.

    In a TF1-style graph the broadcast ops are built once here (on placeholders) and every call only runs them
    in `session`.

    Args:
        root_rank: the global rank whose object is sent.
        session: TF1-style graphs: the session to run them in (default: the default session at call time).
        name: prefix of the collectives' names (default "broadcast_object_fn").
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        callable: `fn(obj)`.
    """
    name = name or "broadcast_object_fn"
    if tf.executing_eagerly():
        return lambda obj: broadcast_object(obj, root_rank, name=name, process_set=process_set)
    # The object collectives' two broadcasts (".sz", ".t": tfring.common.object_collectives), built once.
    ins = {s: tf.compat.v1.placeholder(tf.uint8, [None], name=name + s + "_in") for s in (".sz", ".t")}
    outs = {s: broadcast(ins[s], root_rank, name=name + s, process_set=process_set) for s in ins}

    def run(obj):
        sess = session or tf.compat.v1.get_default_session()
        return object_collectives.broadcast_object(
            obj, root_rank, rank(), lambda a, n: sess.run(outs[n[len(name):]], {ins[n[len(name):]]: a}), name)
    return run


def allgather_object(obj, session=None, name=None, process_set=None):
    """Gathers a Python object from every rank of the set (serialized with cloudpickle).

    Args:
        obj: this rank's object.
        session: TF1-style graphs: the session to run the collectives in (default: the default session).
        name: prefix of the collectives' names (default "allgather_object").
        process_set: the `tfring.ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        list: the objects of the set's ranks, in rank order, on every rank.
    """
    return object_collectives.allgather_object(
        obj, lambda a, n: _to_numpy(allgather(tf.constant(a), name=n, process_set=process_set), session),
        name or "allgather_object")
