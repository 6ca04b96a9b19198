"""State objects of an elastic job (Horovod's `State` / `ObjectState`): what is committed, rolled back on a
failure and sent to ranks that join."""
import copy

from tfring.common.elastic import checkpoint as _checkpoint
from tfring.common.elastic import membership, world
from tfring.common.errors import HostsUpdatedInterrupt


class State:
    """Base class: `save()` / `restore()` / `sync()` define what the state is; `commit()` saves it and checks
    for new hosts; reset callbacks run after every membership change (e.g. to rescale the learning rate).

    Framework-free: each binding's `State` passes its own `broadcast_object` (tfring.tensorflow.elastic,
    tfring.torch.elastic), as Horovod's common/elastic.py takes `bcast_object` from the binding.

    Args:
        bcast_object: how an object travels from rank 0: `bcast_object(obj)` returns rank 0's `obj`.
        get_rank: accepted for Horovod compatibility (unused).

    Raises:
        TypeError: `bcast_object` is not callable.
    """

    _default_bcast_object = None  # a binding's State sets its broadcast here (staticmethod)

    def __init__(self, bcast_object=None, get_rank=None):
        bcast_object = bcast_object or type(self)._default_bcast_object
        if not callable(bcast_object):
            raise TypeError("tfring.elastic.State: bcast_object=%r must be callable (a binding's broadcast_object; "
                            "use tfring.tensorflow.elastic or tfring.torch.elastic's State)" % (bcast_object,))
        self._bcast_object = bcast_object
        self._reset_callbacks = []
        self._commits = 0

    def register_reset_callbacks(self, callbacks):
        """Adds callables run (no arguments) after each reset, when `size()` and `rank()` are the new ones.

        Args:
            callbacks: a list of callables.
        """
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Called by `run` after the membership changed: `reset()`, then the registered callbacks."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (what a failure rolls back to) and checks for new hosts.

        Raises:
            HostsUpdatedInterrupt: hosts were added (on every rank alike); `run` lets them join.
        """
        self.save()
        self._commits += 1
        _checkpoint.save(self._snapshot(), self._commits)
        self.check_host_updates()

    def _snapshot(self):
        """What a restarted job resumes from (subclasses add to it)."""
        return {}

    def _load_snapshot(self, snapshot):
        """Makes `snapshot` the saved state (then `restore()` applies it)."""

    def _resume_after_restart(self):
        """At the first sync of a job started again (with --commit-dir, or by the elastic launcher after a lost host),
        rank 0 takes up the newest commit on disk before it sends its state; a commit it cannot load fails every
        rank alike. Later syncs (after a failure or a growth) and processes a growth added never read the disk:
        the commit in memory is newer."""
        if not _checkpoint.first_sync() or not _checkpoint.resumable():
            return
        error = None
        if world.rank_is_root():
            try:
                found = _checkpoint.load()
                if found is not None:
                    self._commits, snapshot = found
                    self._load_snapshot(snapshot)
                    self.restore()
            except Exception as e:  # noqa: BLE001 - said on every rank below
                error = "tfring.elastic: cannot resume from the commit in %s: %s: %s" % (
                    _checkpoint.directory(), type(e).__name__, e)
        error = self._bcast_object(error)
        if error:
            raise RuntimeError(error)

    def check_host_updates(self):
        """Raises `HostsUpdatedInterrupt` on every rank when the launcher reported hosts the job can grow onto.

        Rank 0 holds the launcher's latest answer; one broadcast makes the decision the same on every rank.

        Raises:
            HostsUpdatedInterrupt: the job will grow at this point.
        """
        if not membership.enabled():  # no launcher to offer hosts (the same on every rank): no broadcast per commit
            return
        pending = world.pending_growth() if world.rank_is_root() else None
        pending = self._bcast_object(pending)
        if pending:
            world.set_agreed_growth(pending)
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        """Keeps a copy of the state (subclasses).

        Raises:
            NotImplementedError: `State` itself defines no state; a subclass implements it.
        """
        raise NotImplementedError()

    def restore(self):
        """Returns to the last saved copy (subclasses).

        Raises:
            NotImplementedError: `State` itself defines no state; a subclass implements it.
        """
        raise NotImplementedError()

    def sync(self):
        """Makes every rank's state rank 0's (subclasses), then saves it.

        Raises:
            NotImplementedError: `State` itself defines no state; a subclass implements it.
        """
        raise NotImplementedError()

    def reset(self):
        """Hook run after a membership change, before the reset callbacks (subclasses)."""


class ObjectState(State):
    """State made of plain Python attributes: `ObjectState(epoch=0, batch=0)` gives `state.epoch`, ...

    The attributes travel with the binding's `broadcast_object` (cloudpickle) from rank 0 on `sync()`.

    Args:
        bcast_object: how an object travels from rank 0 (the binding's `broadcast_object`).
        get_rank: accepted for Horovod compatibility (unused).
        **kwargs: the attributes and their initial values.
    """

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def _snapshot(self):
        return {"objects": self._saved_state}

    def _load_snapshot(self, snapshot):
        # An attribute added since the commit keeps its initial value.
        self._saved_state = dict(self._saved_state, **snapshot["objects"])

    def restore(self):
        self._set_attrs()

    def sync(self):
        self._resume_after_restart()
        # The commit count travels too: a rank that joins numbers its on-disk commits like the others.
        self._commits, self._saved_state = self._bcast_object((self._commits, self._saved_state))
        self._set_attrs()

    def _set_attrs(self):
        for k, v in self._saved_state.items():
            setattr(self, k, copy.deepcopy(v))


def binding_states(binding, broadcast_object, module):
    """A binding's `State` and `ObjectState` (Horovod gives each framework its own): the classes above whose
    default `bcast_object` is the binding's `broadcast_object`, so every binding writes them once, here.

    Args:
        binding: the binding's name, for the docs and the collective's name (e.g. "tfring.torch").
        broadcast_object: the binding's `broadcast_object(obj, root_rank=0, name=...)`.
        module: the module that exports them (their `__module__`).

    Returns:
        tuple: (State, ObjectState).
    """
    def bcast(obj):
        return broadcast_object(obj, root_rank=0, name=binding + ".elastic.state")

    how = "broadcasting with `%s.broadcast_object`" % binding
    made = []
    for base in (State, ObjectState):
        doc = "%s %s (the default `bcast_object`).\n\n%s" % (
            base.__doc__.split("\n")[0], how, base.__doc__.split("\n\n", 1)[1] if "\n\n" in base.__doc__ else "")
        made.append(type(base.__name__, (base,), {"_default_bcast_object": staticmethod(bcast), "__doc__": doc,
                                                  "__module__": module, "__qualname__": base.__name__}))
    return tuple(made)
