"""Names of collectives, the core's one rule (tfring/cc/common/names.h), for the bindings that name in Python (MXNet,
JAX's traced calls) and for the Keras reducer's stall labels: an unnamed collective is "<prefix>.noname.<n>", n
counted by the core per (kind, process set, scope) and restarted by it on every member at init, shutdown, a completed
join on the set and the set's removal; a call of several tensors negotiates "<base>_<i>of<n>" for each."""
import ctypes
import functools

from tfring.common import library

_BUFFER = 4096


def unnamed(prefix, process_set_id, scope=""):
    """The name of the next collective of kind `prefix` the user did not name, on the set, counted in `scope`.

    Args:
        prefix: the collective's kind ("allreduce", "grouped_allgather", ...).
        process_set_id: the set it runs on.
        scope: "" outside a traced function; else a token of the trace (names restart per trace).

    Returns:
        str: "<prefix>.noname.<n>".
    """
    out = ctypes.create_string_buffer(_BUFFER)
    n = library.core().tfring_unnamed_collective(prefix.encode(), int(process_set_id), scope.encode(), out, _BUFFER)
    if n < 0:
        raise ValueError("tfring: the collective kind %r is too long for a name" % (prefix,))
    return out.value.decode()


def release_scope(scope):
    """Drops the counts of a scope that will not name again (a freed trace)."""
    c = library.loaded()
    if c is not None:  # at interpreter exit the core may be gone already; nothing to drop then
        c.tfring_release_name_scope(scope.encode())


def tensor_names(base, count):
    """The names a call of `count` tensors negotiates: [base] for one, "<base>_<i>of<count>" for each of a group.

    Returns:
        list of str
    """
    return list(_tensor_names(base, count))


@functools.lru_cache(maxsize=4096)  # the Keras reducer labels its groups at every step: the same few names
def _tensor_names(base, count):
    size = len(base.encode()) * count + 16 * count + 1
    out = ctypes.create_string_buffer(size)
    if library.core().tfring_tensor_names(base.encode(), int(count), out, size) < 0:
        raise ValueError("tfring: cannot name %d tensors after %r" % (count, base))
    return tuple(out.value.decode().split("\n"))
