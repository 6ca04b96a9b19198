"""Python objects over tfring.mxnet collectives (Horovod's `horovod.mxnet.functions`): pickled with cloudpickle
and sent as uint8 arrays."""
import io

import cloudpickle
import mxnet as mx
import numpy as np

from tfring.mxnet.mpi_ops import allgather, broadcast_, rank


def _to_array(obj):
    buf = io.BytesIO()
    cloudpickle.dump(obj, buf)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


def broadcast_object(obj, root_rank=0, name=None):
    """Sends root_rank's picklable `obj` to every rank.

    Args:
        obj: any object cloudpickle can serialize (only root_rank's is used).
        root_rank: the sending rank.
        name: a name every rank gives this call (None: "broadcast_object").

    Returns:
        root_rank's object (a copy on every other rank).

    Raises:
        RuntimeError: tfring is not initialized, or the collective failed.
    """
    name = name or "broadcast_object"
    payload = _to_array(obj) if rank() == root_rank else np.zeros(0, np.uint8)
    length = broadcast_(mx.nd.array([len(payload)], dtype=np.int64), root_rank, name=name + ".size")
    n = int(length.asscalar())
    data = mx.nd.array(payload, dtype=np.uint8) if rank() == root_rank else mx.nd.zeros((n,), dtype=np.uint8)
    data = broadcast_(data, root_rank, name=name + ".data")
    return cloudpickle.loads(data.asnumpy().tobytes())


def allgather_object(obj, name=None):
    """Gathers every rank's picklable `obj`.

    Args:
        obj: any object cloudpickle can serialize.
        name: a name every rank gives this call (None: "allgather_object").

    Returns:
        list: one object per rank, in rank order.

    Raises:
        RuntimeError: tfring is not initialized, or the collective failed.
    """
    name = name or "allgather_object"
    payload = _to_array(obj)
    sizes = allgather(mx.nd.array([len(payload)], dtype=np.int64), name=name + ".sizes").asnumpy()
    data = allgather(mx.nd.array(payload, dtype=np.uint8), name=name + ".data").asnumpy().tobytes()
    out, off = [], 0
    for n in sizes.tolist():
        out.append(cloudpickle.loads(data[off:off + n]))
        off += n
    return out
