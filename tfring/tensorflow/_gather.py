"""tfring.tensorflow's allgather, grouped_allgather, broadcast and alltoall (Horovod's signatures)."""
import tensorflow as tf

from tfring.tensorflow import _handles as _h


@_h.shared_docs
def allgather(tensor, name=None, process_set=None, ignore_name_scope=False):
    """Concatenates every rank's tensor along dimension 0, in rank order.

    The first dimension may differ between ranks; the others must agree. A scalar gathers to a vector.

    Args:
        tensor: a tensor of a numeric or bool dtype.
        {collective_args}

    Returns:
        A tensor whose first dimension is the sum of the ranks' first dimensions.

    Raises:
        ValueError: `process_set` is not registered; tfring is not initialized.
        TypeError: the dtype is not supported.
        tf.errors.FailedPreconditionError: the ranks disagree on dtype or the other dimensions.
    """
    pid = _h.set_id("allgather", process_set)
    tensor = tf.convert_to_tensor(tensor)
    _h.check_dtype("allgather", tensor, _h.ANY)
    return _h.ops().horovod_allgather(tensor, ignore_name_scope=ignore_name_scope, process_set_id=pid,
                                      **_h.names("HorovodAllgather", tensor, name))


@_h.shared_docs
def grouped_allgather(tensors, name=None, process_set=None, ignore_name_scope=False):
    """`allgather` of a list of tensors in one negotiation (one op when they share a dtype).

    Args:
        tensors: a list of tensors of numeric or bool dtypes.
        {collective_args}

    Returns:
        list: the gathered tensors, in the order of `tensors`.

    Raises:
        ValueError: `process_set` is not registered; tfring is not initialized.
        TypeError: a dtype is not supported.
    """
    pid = _h.set_id("grouped_allgather", process_set)
    tensors = _h.convert_group("grouped_allgather", tensors, _h.ANY)
    if not tensors:
        return []
    if len({t.dtype for t in tensors}) > 1:
        return [allgather(t, name=None if name is None else "%s_%d" % (name, i), process_set=process_set)
                for i, t in enumerate(tensors)]
    return _h.ops().horovod_grouped_allgather(tensors, ignore_name_scope=ignore_name_scope, process_set_id=pid,
                                              **_h.names("HorovodGroupedAllgather", tensors[0], name))


@_h.shared_docs
def broadcast(tensor, root_rank, name=None, process_set=None, ignore_name_scope=False):
    """Every rank of the set receives `root_rank`'s tensor.

    Args:
        tensor: a tensor of a numeric or bool dtype (the same shape on every rank).
        root_rank: the global rank whose value is sent (also with a process set).
        {collective_args}

    Returns:
        A tensor: `root_rank`'s value.

    Raises:
        TypeError: `root_rank` is not an int, or the dtype is not supported.
        ValueError: `process_set` is not registered; tfring is not initialized.
        tf.errors.InvalidArgumentError: `root_rank` is not a rank of the set.
    """
    pid = _h.set_id("broadcast", process_set)
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise TypeError("tfring.broadcast: root_rank must be an int, got %r" % (root_rank,))
    tensor = tf.convert_to_tensor(tensor)
    _h.check_dtype("broadcast", tensor, _h.ANY)
    return _h.ops().horovod_broadcast(tensor, root_rank=root_rank, ignore_name_scope=ignore_name_scope,
                                      process_set_id=pid, **_h.names("HorovodBroadcast", tensor, name))


@_h.shared_docs
def alltoall(tensor, splits=None, name=None, process_set=None, ignore_name_scope=False):
    """Sends `splits[i]` rows of `tensor` to rank i of the set and receives the rows the others send.

    Args:
        tensor: a tensor of a numeric or bool dtype.
        splits: rows for each rank (a list or 1-D int tensor summing to `tensor`'s first dimension); None
            splits the rows evenly.
        {collective_args}

    Returns:
        The received rows (concatenated in rank order); with `splits` given, the pair `(rows,
        received_splits)`, `received_splits[i]` being the number of rows rank i sent, as in Horovod.

    Raises:
        ValueError: `process_set` is not registered; tfring is not initialized.
        TypeError: the dtype is not supported.
        tf.errors.InvalidArgumentError: the splits do not add up.
    """
    pid = _h.set_id("alltoall", process_set)
    tensor = tf.convert_to_tensor(tensor)
    _h.check_dtype("alltoall", tensor, _h.ANY)
    splits_t = tf.zeros([0], tf.int32) if splits is None else tf.cast(tf.convert_to_tensor(splits), tf.int32)
    out, received = _h.ops().horovod_alltoall(tensor, splits_t, ignore_name_scope=ignore_name_scope,
                                              process_set_id=pid, **_h.names("HorovodAlltoall", tensor, name))
    return out if splits is None else (out, received)
