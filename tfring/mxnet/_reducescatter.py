"""tfring.mxnet's reducescatter and grouped_reducescatter (blocking)."""
from tfring.common.process_sets import global_process_set
from tfring.common.reduce_ops import Average
from tfring.mxnet import _handles as _h


def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces `tensor` over the ranks and gives each rank its block of the first dimension; blocks.

    Args:
        tensor: an mx.nd.NDArray on the CPU, of the same shape on every rank.
        op: Average (default), Sum, Min, Max or Product.
        name: the name every rank gives this reducescatter (None: numbered automatically).
        priority: accepted for Horovod's signature (the call blocks).
        process_set: the ranks taking part (default: all).
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result.

    Returns:
        mx.nd.NDArray: this rank's rows of the reduced tensor (earlier ranks get one more row when the first
        dimension does not divide evenly).

    Raises:
        ValueError: an unsupported op; InvalidArgumentError (a ValueError and an MXNetError): a scalar (0-d)
            tensor (raised on every rank), an unsupported dtype, or a process set this rank is not in.
        mxnet.base.MXNetError: not initialized, or the ranks disagree (a RuntimeError).
    """
    op = _h.resolve("reducescatter", None, op)
    _h.check_arrays("reducescatter", [tensor], reduce=True)
    out = _h.host_run(_h.REDUCESCATTER, "reducescatter", [tensor], name, process_set, op, prescale_factor,
                      postscale_factor)[0]
    return _h.to_nd(out, tensor)


def grouped_reducescatter(tensors, op=Average, name=None, priority=0, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """`reducescatter` of a list of arrays as one operation (see `reducescatter`).

    Returns:
        list of mx.nd.NDArray: this rank's block of each reduced array.
    """
    op = _h.resolve("grouped_reducescatter", None, op)
    tensors = list(tensors)
    _h.check_arrays("grouped_reducescatter", tensors, reduce=True)
    outs = _h.host_run(_h.REDUCESCATTER, "grouped_reducescatter", tensors, name, process_set, op, prescale_factor,
                       postscale_factor)
    return [_h.to_nd(o, t) for o, t in zip(outs, tensors)]
