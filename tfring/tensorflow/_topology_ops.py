"""The topology ops (size_op, rank_op, ...): graph-time values of a process set's topology, as Horovod's."""
from tfring.tensorflow._library import load as _ops


def size_op(process_set_id=0, name=None):
    """The number of ranks in the set, as a graph op (evaluated when it runs).

    Args:
        process_set_id: id of a registered process set (`ProcessSet.process_set_id`; 0: all ranks).
        name: name of the graph op (optional).

    Returns:
        An int32 scalar tensor.
    """
    return _ops().horovod_size(process_set_id=process_set_id, name=name)


def rank_op(process_set_id=0, name=None):
    """This process's rank in the set, as a graph op (evaluated when it runs).

    Args:
        process_set_id: id of a registered process set (`ProcessSet.process_set_id`; 0: all ranks).
        name: name of the graph op (optional).

    Returns:
        An int32 scalar tensor.
    """
    return _ops().horovod_rank(process_set_id=process_set_id, name=name)


def local_size_op(process_set_id=0, name=None):
    """The number of the set's ranks on this host, as a graph op (evaluated when it runs).

    Args:
        process_set_id: id of a registered process set (`ProcessSet.process_set_id`; 0: all ranks).
        name: name of the graph op (optional).

    Returns:
        An int32 scalar tensor.
    """
    return _ops().horovod_local_size(process_set_id=process_set_id, name=name)


def local_rank_op(process_set_id=0, name=None):
    """This process's rank among the set's ranks on this host, as a graph op (evaluated when it runs).

    Args:
        process_set_id: id of a registered process set (`ProcessSet.process_set_id`; 0: all ranks).
        name: name of the graph op (optional).

    Returns:
        An int32 scalar tensor.
    """
    return _ops().horovod_local_rank(process_set_id=process_set_id, name=name)


def process_set_included_op(process_set_id=0, name=None):
    """Whether this rank is in the process set, as a graph op.

    Args:
        process_set_id: id of a registered process set (`ProcessSet.process_set_id`; 0: all ranks).
        name: name of the graph op (optional).

    Returns:
        An int32 scalar tensor: 1 if this rank is in the set, else 0.
    """
    return _ops().horovod_process_set_included(process_set_id=process_set_id, name=name)
