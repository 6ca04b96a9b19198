"""tfring.tensorflow's reducescatter and grouped_reducescatter (Horovod's signatures)."""
import tensorflow as tf

from tfring.common.reduce_ops import Average, check_op
from tfring.tensorflow import _handles as _h


@_h.shared_docs
def reducescatter(tensor, op=Average, name=None, process_set=None, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over the ranks, then rank i of the set keeps the i-th block of dimension 0.

    The first `dim0 % size` ranks get one row more than the others.

    Args:
        tensor: a tensor of a numeric dtype, at least 1-D, of the same shape on every rank.
        op: `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        {collective_args}
        prescale_factor, postscale_factor: multiply the input before, the result after the reduction.

    Returns:
        A tensor: this rank's block of the reduced tensor.

    Raises:
        ValueError: `op` is unknown, or `process_set` is not registered; tfring is not initialized.
        TypeError: the dtype is not supported.
        tf.errors.InvalidArgumentError: `tensor` is a scalar.
    """
    pid = _h.set_id("reducescatter", process_set)
    check_op("reducescatter", op, adasum=False)
    tensor = tf.convert_to_tensor(tensor)
    _h.check_dtype("reducescatter", tensor, _h.NUMERIC)
    return _h.ops().horovod_reducescatter(tensor, reduce_op=op, prescale_factor=prescale_factor,
                                          postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                                          process_set_id=pid, **_h.names("HorovodReducescatter", tensor, name))


@_h.shared_docs
def grouped_reducescatter(tensors, op=Average, name=None, process_set=None, ignore_name_scope=False,
                          prescale_factor=1.0, postscale_factor=1.0):
    """`reducescatter` of a list of tensors in one negotiation (one op when they share a dtype).

    Args:
        tensors: a list of tensors of numeric dtypes.
        op: `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        {collective_args}
        prescale_factor, postscale_factor: multiply the input before, the result after the reduction.

    Returns:
        list: this rank's blocks, in the order of `tensors`.

    Raises:
        ValueError: `op` is unknown, or `process_set` is not registered; tfring is not initialized.
        TypeError: a dtype is not supported.
    """
    pid = _h.set_id("grouped_reducescatter", process_set)
    check_op("grouped_reducescatter", op, adasum=False)
    tensors = _h.convert_group("grouped_reducescatter", tensors, _h.NUMERIC)
    if not tensors:
        return []
    if len({t.dtype for t in tensors}) > 1:
        return [reducescatter(t, op=op, name=None if name is None else "%s_%d" % (name, i),
                              prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                              ignore_name_scope=ignore_name_scope, process_set=process_set)
                for i, t in enumerate(tensors)]
    return _h.ops().horovod_grouped_reducescatter(tensors, reduce_op=op, prescale_factor=prescale_factor,
                                                  postscale_factor=postscale_factor,
                                                  ignore_name_scope=ignore_name_scope, process_set_id=pid,
                                                  **_h.names("HorovodGroupedReducescatter", tensors[0], name))
