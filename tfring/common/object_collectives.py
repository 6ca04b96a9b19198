"""Python objects over a binding's byte collectives, written once for every binding (Horovod's
`broadcast_object` / `allgather_object`): serialized with cloudpickle, so lambdas and classes defined in `__main__`
travel too, and read back with the standard unpickler (they come from the job's own ranks). Lengths travel as
8 bytes each, so a binding only has to move uint8 arrays (JAX without x64 has no int64)."""
import pickle

import cloudpickle
import numpy as np


def _encode(lengths):
    return np.frombuffer(np.asarray(lengths, "<i8").tobytes(), np.uint8)


def _decode(data):
    return np.frombuffer(np.asarray(data, np.uint8).tobytes(), "<i8").tolist()


def broadcast_object(obj, root_rank, rank, bcast, name):
    """Sends a Python object from `root_rank` to every rank of a set.

    Args:
        obj: the object (only the root's is used; the others may pass None).
        root_rank: the global rank whose object is sent.
        rank: this process's global rank.
        bcast: the binding's `bcast(uint8 numpy array, name)`, returning the root's array (as numpy) on every
            rank; the array has the root's length on every rank.
        name: prefix of the collectives' names.

    Returns:
        `root_rank`'s object (on the root, `obj` itself).
    """
    root = rank == root_rank
    payload = np.frombuffer(cloudpickle.dumps(obj), np.uint8) if root else None
    (n,) = _decode(bcast(_encode([payload.size if root else 0]), name + ".sz"))
    data = bcast(payload if root else np.zeros(n, np.uint8), name + ".t")
    return obj if root else pickle.loads(np.asarray(data).tobytes())


def allgather_object(obj, gather, name):
    """Gathers a Python object from every rank of a set.

    Args:
        obj: this rank's object.
        gather: the binding's `gather(uint8 numpy array, name)`, returning every rank's arrays concatenated in rank
            order (as numpy).
        name: prefix of the collectives' names.

    Returns:
        list: the objects of the set's ranks, in rank order.
    """
    payload = np.frombuffer(cloudpickle.dumps(obj), np.uint8)
    sizes = _decode(gather(_encode([payload.size]), name + ".sz"))
    data = np.asarray(gather(payload, name + ".t")).tobytes()
    out, offset = [], 0
    for n in sizes:
        out.append(pickle.loads(data[offset:offset + n]))
        offset += n
    return out
