"""PyTorch states of an elastic job (Horovod's `TorchState` and its state handlers): models, optimizers, LR
schedulers and `ElasticSampler`s kept as in-memory copies at each commit, loaded back on a rollback and sent
from rank 0 on `sync()`; everything else is an `ObjectState` attribute."""
import copy

import torch

from tfring.common.elastic import state as _state
from tfring.torch.elastic.sampler import ElasticSampler
from tfring.torch.functions import broadcast_object


State, ObjectState = _state.binding_states("tfring.torch", broadcast_object, __name__)
_bcast_object = State._default_bcast_object


class StateHandler:
    """Commits, restores and syncs one object of a `TorchState` (Horovod's handler protocol).

    Args:
        value: the object.
    """

    def __init__(self, value):
        self.value = value
        self.saved = None
        self.save_local()

    def save_local(self):
        """Keeps a copy of this rank's object (no collective)."""
        self.saved = copy.deepcopy(self.value.state_dict())

    def save(self):
        """Keeps a copy of the object (every rank calls it at a commit; it may run a collective)."""
        self.save_local()

    def restore(self):
        """Loads the kept copy into the object.

        A copy of the copy is loaded: `Optimizer.load_state_dict` keeps the tensors it is given, which the next
        steps then update in place (a second rollback to the same commit would find them changed).
        """
        self.value.load_state_dict(copy.deepcopy(self.saved))

    def sync(self):
        """Makes every rank's object rank 0's (a collective)."""
        self.value.load_state_dict(_bcast_object(self.value.state_dict()))

    def set_value(self, value):
        """Tracks another object (`state.model = new_model`) and keeps its copy.

        Args:
            value: the new object.
        """
        self.value = value
        self.save_local()


class ModelStateHandler(StateHandler):
    """A `torch.nn.Module`: parameters and buffers broadcast in place from rank 0."""

    def sync(self):
        from tfring.torch.functions import broadcast_parameters
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    """A `torch.optim.Optimizer` (or `DistributedOptimizer`): hyperparameters and per-parameter state. Sharded, a
    commit keeps the whole state (gathered: the part of a rank that dies is restored from it), while the copy made
    without a collective (at construction) is this rank's part."""

    def save_local(self):
        self.saved = copy.deepcopy(getattr(self.value, "own_state_dict", self.value.state_dict)())

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def sync(self):
        from tfring.torch.functions import broadcast_optimizer_state
        broadcast_optimizer_state(self.value, root_rank=0)


class LRSchedulerStateHandler(StateHandler):
    """A learning-rate scheduler: its `state_dict()` broadcast as an object."""


class SamplerStateHandler(StateHandler):
    """An `ElasticSampler`: a commit keeps the union of every rank's processed indices, so after a reset the
    sampler re-shards exactly what no rank had processed at the commit."""

    def _world_state(self):
        from tfring.torch.functions import allgather_object
        state = self.value.state_dict()
        processed = allgather_object(state["processed_indices"], name="tfring.torch.elastic.sampler")
        state["processed_indices"] = set().union(*processed)
        return state

    def save(self):
        self.saved = self._world_state()

    def sync(self):
        # The union, not rank 0's own indices: after a growth (no rollback) each rank holds only its shard's.
        self.value.load_state_dict(_bcast_object(self._world_state()))


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (torch.optim.lr_scheduler.LRScheduler, LRSchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    """The (type, handler class) pairs `TorchState` picks handlers from, first match wins.

    Returns:
        list: pairs (type, `StateHandler` subclass).
    """
    return _handler_registry


def set_handler_registry(registry):
    """Replaces the registry of `get_handler_registry()` (for TorchStates created afterwards).

    Args:
        registry: a list of (type, `StateHandler` subclass) pairs.
    """
    global _handler_registry
    _handler_registry = list(registry)


def _handler_for(value):
    for kind, handler in _handler_registry:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """The state of a PyTorch training job: a model, an optimizer and any other attributes.

    Keyword arguments that are models, optimizers, LR schedulers or `ElasticSampler`s (several of each are
    fine) are handled by their `state_dict()`: a commit keeps deep copies in memory, a rollback loads them back,
    `sync()` broadcasts them from rank 0 (`broadcast_parameters`, `broadcast_optimizer_state`, `broadcast_object`)
    and keeps the result as the first commit. Other keyword arguments are plain `ObjectState` attributes.
    Assigning a new object to a handled attribute (`state.model = m`) tracks and saves the new one.

    Args:
        model: a `torch.nn.Module` (optional).
        optimizer: a `torch.optim.Optimizer` or `tfring.torch.DistributedOptimizer` (optional).
        **kwargs: more handled objects, and plain attributes.
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                plain[name] = value
            else:
                handlers[name] = handler
        self.__dict__["_handlers"] = handlers
        for name, handler in handlers.items():
            self.__dict__[name] = handler.value
        super().__init__(**plain)

    def __setattr__(self, name, value):
        handler = self.__dict__.get("_handlers", {}).get(name)
        if handler is not None:
            handler.set_value(value)
        super().__setattr__(name, value)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        self._resume_after_restart()  # rank 0 of a job restarted after a lost host: before it sends its state
        for handler in self._handlers.values():
            handler.sync()
        # What a failure before the first commit rolls back to: the synced state, the same on every rank.
        for handler in self._handlers.values():
            handler.save()
        super().sync()

    def _snapshot(self):
        return dict(super()._snapshot(), torch={name: h.saved for name, h in self._handlers.items()})

    def _load_snapshot(self, snapshot):
        super()._load_snapshot(snapshot)
        for name, saved in snapshot.get("torch", {}).items():
            if name in self._handlers:
                self._handlers[name].saved = saved
