"""Python objects over tfring.mxnet collectives (Horovod's `horovod.mxnet.functions`): pickled with cloudpickle
and sent as uint8 arrays."""
import mxnet as mx
import numpy as np

from tfring.common import object_collectives
from tfring.mxnet.mpi_ops import allgather, broadcast_, rank


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
    return object_collectives.broadcast_object(
        obj, root_rank, rank(), lambda a, n: broadcast_(mx.nd.array(a, dtype=np.uint8), root_rank, name=n).asnumpy(),
        name or "broadcast_object")


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
    return object_collectives.allgather_object(
        obj, lambda a, n: allgather(mx.nd.array(a, dtype=np.uint8), name=n).asnumpy(), name or "allgather_object")
