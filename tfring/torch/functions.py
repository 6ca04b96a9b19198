"""Broadcast a model's parameters, an optimizer's state and arbitrary Python objects (Horovod's
`horovod.torch.functions`).

Objects are serialised with cloudpickle (lambdas, closures and classes defined in __main__ travel too, as in
Horovod) and read back with the standard unpickler: they come from the job's own ranks. Root ranks are global
ranks, as in Horovod."""

import torch

from tfring.common import object_collectives
from tfring.torch.mpi_ops import allgather, broadcast_, broadcast_async_, global_process_set, rank, synchronize


def _broadcast_tensors_(named_tensors, root_rank, process_set):
    """Broadcasts every (name, tensor) in place, all in flight at once."""
    handles = []
    with torch.no_grad():
        for name, tensor in named_tensors:
            # detach(): parameters that require grad can be written in place; shares the storage.
            buf = tensor.detach() if tensor.is_contiguous() else tensor.detach().contiguous()
            handles.append((tensor, buf, broadcast_async_(buf, root_rank, name=name, process_set=process_set)))
        for tensor, buf, handle in handles:
            synchronize(handle)
            if not tensor.is_contiguous():
                tensor.detach().copy_(buf)


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites the parameters of every rank with `root_rank`'s, in place.

    Typically `broadcast_parameters(model.state_dict(), root_rank=0)` after building the model (buffers such as
    BatchNorm's running statistics travel too), or `model.named_parameters()`.

    Args:
        params: a dict {name: tensor} (a state_dict), or an iterable of (name, tensor) tuples or of tensors. Every
            rank must pass the same names (or, without names, the same tensors in the same order).
        root_rank: the global rank whose values are sent.
        process_set: the `ProcessSet` to broadcast within (default: all ranks); only its ranks call it.

    Raises:
        ValueError: params is neither a dict nor an iterable of tensors or (name, tensor) tuples.
    """
    if isinstance(params, dict):
        items = sorted(params.items(), key=lambda item: str(item[0]))
    else:
        try:
            items = list(params)
        except TypeError:
            raise ValueError("invalid params of type: %s (expected a state_dict or named_parameters())"
                             % type(params).__name__) from None
        items = [p if isinstance(p, tuple) else (None, p) for p in items]
    named = []
    for i, item in enumerate(items):
        if len(item) != 2 or not torch.is_tensor(item[1]):
            raise ValueError("broadcast_parameters: params[%d] is not a tensor nor a (name, tensor) tuple: %r"
                             % (i, type(item[1] if len(item) == 2 else item).__name__))
        name, tensor = item
        named.append(("broadcast_parameters.%s" % (name if name is not None else "noname.%d" % i), tensor))
    _broadcast_tensors_(named, root_rank, process_set)


class _TensorSpec:
    """Stands for a tensor of the root's optimizer state in the structure broadcast to the other ranks."""

    def __init__(self, tensor):
        self.shape, self.dtype, self.on_cpu = tuple(tensor.shape), tensor.dtype, tensor.device.type == "cpu"


def _state_layout(optimizer):
    """Size and hyperparameters of every param group, and per parameter position (group, index) its state (tensors
    as _TensorSpec)."""
    sizes = [len(group["params"]) for group in optimizer.param_groups]
    groups = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    states = {}
    for g, group in enumerate(optimizer.param_groups):
        for j, p in enumerate(group["params"]):
            if optimizer.state.get(p):
                states[(g, j)] = {k: _TensorSpec(v) if torch.is_tensor(v) else v
                                  for k, v in optimizer.state[p].items()}
    return sizes, groups, states


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state equal to `root_rank`'s, in place.

    Hyperparameters of every param group (lr, betas, ...), each parameter's state tensors (momentum buffers,
    Adam's moments and step, ...) and non-tensor state entries are copied from the root; state the root does not
    have is removed. A freshly created optimizer has no state yet; it then stays empty, and is created by the
    first step identically on every rank (Horovod instead runs a step on zero gradients to create it, which moves
    the parameters under weight decay); as after Horovod's, every parameter that requires grad and has no gradient
    then has a zero one. A sharded `DistributedOptimizer` (every rank of its set must call it) gets the whole
    state, each parameter's entries from the rank that holds them (the root's winning: a checkpoint loaded on the
    root alone reaches every rank), and each rank keeps its part.

    Args:
        optimizer: a `torch.optim.Optimizer` or a `DistributedOptimizer`, built on the same model on every rank.
        root_rank: the global rank whose state is sent.
        model: accepted for Horovod compatibility (Horovod uses it to find sparse parameters); unused.
        process_set: the `ProcessSet` to broadcast within (default: all ranks); only its ranks call it.

    Raises:
        ValueError: this rank's optimizer has other param group sizes than the root's.
    """
    del model
    if getattr(optimizer, "_sharding", None) is not None:  # each rank holds a part: the whole goes around
        optimizer._broadcast_sharded_state(root_rank)
        return
    sizes, groups, states = broadcast_object(_state_layout(optimizer), root_rank,
                                             name="broadcast_optimizer_state.layout", process_set=process_set)
    local_sizes = [len(group["params"]) for group in optimizer.param_groups]
    if sizes != local_sizes:
        raise ValueError("broadcast_optimizer_state: rank %d's optimizer has param groups of sizes %s, this rank's "
                         "%s: build the same optimizer on every rank" % (root_rank, sizes, local_sizes))
    for local, root in zip(optimizer.param_groups, groups):
        for key, value in root.items():
            if torch.is_tensor(local.get(key)) and torch.is_tensor(value) and local[key].shape == value.shape:
                local[key].copy_(value)  # keeps the tensor object, which a compiled step may hold
            else:
                local[key] = value
    if not states:
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.requires_grad and p.grad is None:
                        p.grad = torch.zeros_like(p)
    tensors = []
    for g, group in enumerate(optimizer.param_groups):
        for j, p in enumerate(group["params"]):
            root_state = states.get((g, j))
            if root_state is None:
                optimizer.state.pop(p, None)
                continue
            state = optimizer.state[p]
            for key in [k for k in state if k not in root_state]:
                del state[key]
            for key, value in root_state.items():
                if not isinstance(value, _TensorSpec):
                    state[key] = value
                    continue
                local = state.get(key)
                if not (torch.is_tensor(local) and tuple(local.shape) == value.shape and local.dtype == value.dtype):
                    local = state[key] = torch.empty(value.shape, dtype=value.dtype,
                                                     device="cpu" if value.on_cpu else p.device)
                tensors.append(("broadcast_optimizer_state.%d.%d.%s" % (g, j, key), local))
    _broadcast_tensors_(tensors, root_rank, process_set)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Sends a Python object from `root_rank` to every rank of the set.

    Serialized with cloudpickle, so lambdas and classes defined in `__main__` travel too.

    Args:
        obj: the object (only `root_rank`'s is used; the others may pass None).
        root_rank: the global rank whose object is sent.
        name: prefix of the collectives' names (default "broadcast_object"); concurrent calls need distinct names.
        process_set: the `ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        `root_rank`'s object (on `root_rank`, `obj` itself).
    """
    def bcast(array, n):
        tensor = torch.from_numpy(array.copy())
        broadcast_(tensor, root_rank, name=n, process_set=process_set)
        return tensor.numpy()
    return object_collectives.broadcast_object(obj, root_rank, rank(), bcast, name or "broadcast_object")


def allgather_object(obj, name=None, process_set=global_process_set):
    """Gathers a Python object from every rank of the set (serialized with cloudpickle).

    Args:
        obj: this rank's object.
        name: prefix of the collectives' names (default "allgather_object").
        process_set: the `ProcessSet` (default: all ranks); only its ranks call it.

    Returns:
        list: the objects of the set's ranks, in rank order, on every rank.
    """
    return object_collectives.allgather_object(
        obj, lambda a, n: allgather(torch.from_numpy(a.copy()), name=n, process_set=process_set).numpy(),
        name or "allgather_object")
