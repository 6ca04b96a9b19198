"""The topology ops (size_op, rank_op, ...): graph-time values of a process set's topology, as Horovod's."""
from tfring.tensorflow._library import load as _ops

# The five ops differ only in the core op they run and what their value means.
_DOC = """{summary}

    Args:
        process_set_id: id of a registered process set (`ProcessSet.process_set_id`; 0: all ranks).
        name: name of the graph op (optional).

    Returns:
        An int32 scalar tensor{value}.
    """


def _topology_op(public_name, op_name, summary, value=""):
    def op(process_set_id=0, name=None):
        return getattr(_ops(), op_name)(process_set_id=process_set_id, name=name)
    op.__name__ = op.__qualname__ = public_name
    op.__doc__ = _DOC.format(summary=summary, value=value)
    return op


size_op = _topology_op("size_op", "horovod_size",
                       "The number of ranks in the set, as a graph op (evaluated when it runs).")
rank_op = _topology_op("rank_op", "horovod_rank",
                       "This process's rank in the set, as a graph op (evaluated when it runs).")
local_size_op = _topology_op("local_size_op", "horovod_local_size",
                             "The number of the set's ranks on this host, as a graph op (evaluated when it runs).")
local_rank_op = _topology_op(
    "local_rank_op", "horovod_local_rank",
    "This process's rank among the set's ranks on this host, as a graph op (evaluated when it runs).")
process_set_included_op = _topology_op("process_set_included_op", "horovod_process_set_included",
                                       "Whether this rank is in the process set, as a graph op.",
                                       ": 1 if this rank is in the set, else 0")
