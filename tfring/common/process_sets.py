"""Process sets (Horovod's API): collectives among a subset of the ranks.

    evens = tfring.ProcessSet([0, 2])
    tfring.init(process_sets=[evens])
    tfring.allreduce(x, process_set=evens)      # only ranks 0 and 2 call it

Each set negotiates on its own communicator, so sets run concurrently. `broadcast(root_rank=...)` takes a
global rank, as in Horovod. Sets added after init need TFRING_DYNAMIC_PROCESS_SETS=1 and every rank's call.
"""
import ctypes
import threading

from tfring.common import library as _lib
from tfring.common import topology

_change_lock = threading.Lock()  # one add/remove in flight per process (they share one negotiation name)


class ProcessSet:
    """A set of ranks that run collectives among themselves (`process_set=` of every collective).

    Register it with `tfring.init(process_sets=[...])` or `tfring.add_process_set()`; `process_set_id` is set
    then (None before, and after `remove_process_set`). `tfring.global_process_set` is the set of all ranks.

    Args:
        ranks_or_comm: the global ranks (any iterable of ints, order ignored) or an mpi4py communicator whose
            processes form the set (only for `init(process_sets=...)`).

    Raises:
        ValueError: the ranks are not ints or repeat, or the argument is neither ranks nor a communicator.
    """
    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            ranks = None
        if ranks is not None and not isinstance(ranks_or_comm, (str, bytes)):
            if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
                raise ValueError("tfring.ProcessSet: ranks must be ints, got %r" % (ranks_or_comm,))
            if len(set(ranks)) != len(ranks):
                raise ValueError("tfring.ProcessSet: ranks %r contain duplicates" % (ranks,))
            self.ranks = ranks
            return
        from mpi4py import MPI
        if not isinstance(ranks_or_comm, MPI.Comm):
            raise ValueError("tfring.ProcessSet: expected a list of ranks or an mpi4py communicator, got %r"
                             % (ranks_or_comm,))
        self.mpi_comm = ranks_or_comm

    def _invalidate(self):
        self.process_set_id = None

    def _topology(self, field):
        """One field of _set_topology's tuple (0 size, 1 rank, 2 local_size, 3 local_rank); None if unregistered."""
        t = None if self.process_set_id is None else _set_topology(self.process_set_id)
        return None if t is None else t[field]

    def size(self):
        """Number of ranks in the set, or None if it is not registered.

        Returns:
            int or None
        """
        return self._topology(0)

    def rank(self):
        """This process's rank within the set (-1 outside it), or None if it is not registered.

        Collectives such as `broadcast` still take global ranks, as in Horovod.

        Returns:
            int or None
        """
        return self._topology(1)

    def local_size(self):
        """Number of the set's ranks on this host (-1 outside the set; None if it is not registered).

        Returns:
            int or None
        """
        return self._topology(2)

    def local_rank(self):
        """This process's rank among the set's ranks on this host (-1 outside the set; None if unregistered).

        Returns:
            int or None
        """
        return self._topology(3)

    def included(self):
        """Whether this process is in the set.

        Returns:
            bool, or None while the ranks of a set given by a communicator are unknown (before `init`).
        """
        if self.ranks is None:
            return None
        return topology.rank() in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (self.process_set_id, self.ranks,
                                                                           self.mpi_comm)

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
"""The set of all ranks (id 0); `process_set=None` means this set. Its `ranks` are filled in by `init()`."""


def _temp_process_set_object(process_set_id):
    """A ProcessSet for an id known from a graph attr (gradients)."""
    ps = ProcessSet.__new__(ProcessSet)
    ps.process_set_id = process_set_id
    return ps


def _set_topology(process_set_id):
    """(size, rank, local_size, local_rank, included) of a registered set, else None."""
    c = _lib._c
    if c is None:
        return None
    vals = [ctypes.c_int() for _ in range(5)]
    if c.tfring_process_set_topology(int(process_set_id), *[ctypes.byref(v) for v in vals]) != 0:
        return None
    return tuple(v.value for v in vals[:4]) + (bool(vals[4].value),)


def _get_process_set_ids_and_ranks():
    """{id: [global ranks]} of every registered set (identical on every rank)."""
    c = _lib._c
    if c is None or not c.tfring_is_initialized():
        return {}
    cap, cap_ranks = 1024, 1024 * max(topology.size(), 1)
    ids, sizes, ranks = (ctypes.c_int * cap)(), (ctypes.c_int * cap)(), (ctypes.c_int * cap_ranks)()
    n = c.tfring_process_sets(ids, sizes, cap, ranks, cap_ranks)
    out, off = {}, 0
    for i in range(min(n, cap)):
        out[ids[i]] = list(ranks[off:off + sizes[i]])
        off += sizes[i]
    return out


def process_set_of(process_set_id):
    """The ProcessSet behind an id known from an op's attrs (the global set for 0)."""
    return global_process_set if process_set_id == 0 else _temp_process_set_object(process_set_id)


def is_global(process_set):
    """Whether `process_set=` means every rank (None, or the global set's id 0)."""
    if type(process_set) is int and process_set != 0:
        raise ValueError("process_set=%r: pass a tfring.ProcessSet object (ids other than 0 have no size here)"
                         % (process_set,))
    return process_set is None or type(process_set) is int


def process_set_size(process_set):
    """Number of ranks in a process set.

    Args:
        process_set: a `tfring.ProcessSet`, or None (or 0, the global set's id) for all ranks.

    Returns:
        int

    Raises:
        ValueError: the set is not registered, or is given by another id than 0.
    """
    if is_global(process_set):
        return topology.size()
    n = process_set.size()
    if n is None:
        raise ValueError("process_set=%s is not registered: pass it to tfring.init(process_sets=[...]) or "
                         "tfring.add_process_set() first" % (process_set,))
    return n


def process_set_rank(process_set):
    """This process's rank within a process set.

    Args:
        process_set: a `tfring.ProcessSet`, or None (or 0) for all ranks.

    Returns:
        int: the rank in the set (-1 outside it; None if it is not registered); the global rank for all ranks.
    """
    if is_global(process_set):
        return topology.rank()
    return process_set.rank()


def process_set_id_of(process_set, fn):
    """The registered id behind a `process_set=` argument.

    Args:
        process_set: a `ProcessSet`, None (all ranks) or a set id.
        fn: the calling function's name, for the error message.

    Returns:
        int: the id (0 for all ranks).

    Raises:
        ValueError: the set is not registered, or `process_set` is not a `ProcessSet`.
    """
    if process_set is None:
        return 0
    if isinstance(process_set, int) and not isinstance(process_set, bool):
        pid = process_set  # tfring's older spelling: an id
    elif isinstance(process_set, ProcessSet):
        pid = process_set.process_set_id
    else:
        raise ValueError("tfring.%s: process_set=%r must be a tfring.ProcessSet" % (fn, process_set))
    if pid == 0:
        return 0
    if pid is None or (_lib._c is not None and _lib._c.tfring_is_initialized() and _set_topology(pid) is None):
        raise ValueError("tfring.%s: process_set=%s is not registered (pass it to init(process_sets=[...]) or "
                         "add_process_set() first)" % (fn, process_set))
    return pid


def _resolve_static(process_sets, base_comm):
    """Rank lists of init(process_sets=[...]) in the numbering of the communicator tfring runs on. Collective: a
    bad list on any rank raises on every rank (none is left waiting in init)."""
    error = None
    try:
        lists = _validate_static(process_sets, base_comm)
    except (ValueError, TypeError) as e:
        error, lists = e, None
    errors = base_comm.allgather(None if error is None else (type(error).__name__, str(error)))
    if error is not None:
        raise error
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if failed:
        rank, (kind, msg) = failed[0]
        raise ValueError("tfring.init: rank %d refused its process_sets (%s: %s)" % (rank, kind, msg))
    return lists


def _validate_static(process_sets, base_comm):
    lists = []
    for ps in process_sets:
        if not isinstance(ps, ProcessSet):
            raise ValueError("tfring.init: process_sets must hold tfring.ProcessSet objects, got %r" % (ps,))
        if ps.ranks is None:
            from mpi4py import MPI
            mine = []
            if ps.mpi_comm != MPI.COMM_NULL:  # translate the communicator's members to our numbering
                mine = sorted(MPI.Group.Translate_ranks(ps.mpi_comm.group, list(range(ps.mpi_comm.size)),
                                                        base_comm.group))
            known = [r for r in base_comm.allgather(mine) if r]
            if not known or any(k != known[0] for k in known):
                raise ValueError("tfring.init: process set %s: its communicator's members disagree" % ps)
            ps.ranks = known[0]
        bad = [r for r in ps.ranks if not 0 <= r < base_comm.size]
        if bad or not ps.ranks:
            raise ValueError("tfring.init: process set %s has ranks outside [0, %d)" % (ps, base_comm.size))
        lists.append(ps.ranks)
    return lists


def _assign_ids(process_sets):
    """After init: every ProcessSet gets its id; a second object with the same ranks is invalidated (Horovod)."""
    by_ranks = {tuple(r): i for i, r in _get_process_set_ids_and_ranks().items()}
    seen = {0}
    for ps in process_sets:
        ps.process_set_id = by_ranks.get(tuple(ps.ranks))
        if ps.process_set_id in seen:
            ps._invalidate()
        else:
            seen.add(ps.process_set_id)
    global_process_set.ranks = _get_process_set_ids_and_ranks().get(0, [])


def _require_dynamic(fn):
    # The core's parse of TFRING_DYNAMIC_PROCESS_SETS (it refuses the change too; checked first so that this comes
    # before any complaint about the ranks).
    if _lib.core().tfring_dynamic_process_sets() == 0:  # -1: not initialized, which the caller reports
        raise RuntimeError("tfring.%s: adding or removing process sets after init() needs "
                           "TFRING_DYNAMIC_PROCESS_SETS=1 (or HOROVOD_DYNAMIC_PROCESS_SETS=1) on every rank; or pass "
                           "them to init(process_sets=[...])" % fn)


def _change(ranks, remove_id):
    c = _lib._c
    if c is None or not c.tfring_is_initialized():
        raise ValueError("tfring: call tfring.init() before adding or removing process sets")
    arr = (ctypes.c_int * max(len(ranks), 1))(*ranks)
    out, err = ctypes.c_int(-1), ctypes.create_string_buffer(1024)
    with _change_lock:
        if c.tfring_change_process_set(arr, len(ranks), remove_id, ctypes.byref(out), err, len(err)) != 0:
            raise RuntimeError(err.value.decode())
    return out.value


def add_process_set(process_set):
    """Registers a process set after `init()`: a collective of all ranks, each calling it alike.

    Needs TFRING_DYNAMIC_PROCESS_SETS=1 (or HOROVOD_DYNAMIC_PROCESS_SETS=1) on every rank. The new set gets the
    lowest free id.

    Args:
        process_set: a `ProcessSet` given by ranks, or the list of global ranks.

    Returns:
        ProcessSet: the set, registered (`process_set_id` set).

    Raises:
        ValueError: the ranks are empty or out of range, or a set with these ranks exists.
        NotImplementedError: the set is given by an MPI communicator (only `init(process_sets=...)` takes those).
        RuntimeError: dynamic process sets are off, or the change failed.
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.ranks is None:
        raise NotImplementedError("tfring.add_process_set: sets given by an MPI communicator can only be passed to "
                                  "init(process_sets=[...]); pass a list of ranks")
    _require_dynamic("add_process_set")
    bad = [r for r in process_set.ranks if not 0 <= r < topology.size()]
    if bad or not process_set.ranks:
        raise ValueError("tfring.add_process_set: ranks %r must be a non-empty list in [0, %d)"
                         % (process_set.ranks, topology.size()))
    existing = {tuple(r): i for i, r in _get_process_set_ids_and_ranks().items()}
    if tuple(process_set.ranks) in existing:  # the table is identical on every rank: all raise alike
        raise ValueError("tfring.add_process_set: a process set with ranks %s already exists (id %d)"
                         % (process_set.ranks, existing[tuple(process_set.ranks)]))
    new_id = _change(process_set.ranks, -1)
    if new_id < 0:
        raise ValueError("tfring.add_process_set: attempted to add a duplicate process set: %s" % process_set)
    process_set.process_set_id = new_id
    return process_set


def remove_process_set(process_set):
    """Unregisters a process set: a collective of all ranks, each calling it alike.

    Needs TFRING_DYNAMIC_PROCESS_SETS=1 on every rank. On success `process_set.process_set_id` becomes None.

    Args:
        process_set: a registered `ProcessSet`.

    Returns:
        bool: True if it was removed; False for the global set or a set that is not registered.

    Raises:
        RuntimeError: dynamic process sets are off, or the change failed.
    """
    pid = getattr(process_set, "process_set_id", None)
    if pid is None or pid == 0:
        return False
    _require_dynamic("remove_process_set")
    removed = _change([], pid) >= 0  # invalidate only once it is gone everywhere (it may raise)
    if removed:
        process_set._invalidate()
    return removed
