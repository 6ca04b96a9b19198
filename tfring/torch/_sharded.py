"""ZeRO stage 1 for tfring.torch.DistributedOptimizer (`sharded=True`), as torch's ZeroRedundancyOptimizer does it:
the gradients are averaged as without sharding, then each rank of the set runs the wrapped step on the parameters it
owns only (so the wrapped optimizer makes state, e.g. Adam's moments, for those alone) and sends them to the others.
Whole parameters are owned (largest first, to the least loaded rank: the same on every rank that built the same
model). `state_dict()` gathers every rank's part into the unsharded layout (a collective), which loads into a plain
optimizer or a sharded one at any size; `load_state_dict` keeps this rank's part."""
import torch

from tfring.torch._gather import broadcast_
from tfring.torch.functions import allgather_object
from tfring.torch.mpi_ops import size


def members_of(process_set):
    """The set's global ranks now (the global set's change with an elastic reset)."""
    return list(getattr(process_set, "ranks", None) or range(size()))


def partition(params, members):
    """{parameter: owning rank}: the trainable ones largest first, each to the least loaded member (ties: the lower
    rank), then the frozen ones (they weigh nothing: no gradient, no state; owned so that unfreezing one works),
    so that a frozen parameter never leaves a rank without a gradient to hold (stage 2).

    Args:
        params: the parameters in the optimizer's order.
        members: the process set's global ranks.

    Returns:
        dict
    """
    load = {m: 0 for m in members}
    owner = {}
    weight = [p.numel() if p.requires_grad else 0 for p in params]
    for i in sorted(range(len(params)), key=lambda i: (-weight[i], i)):
        m = min(members, key=lambda r: (load[r], r))
        owner[params[i]] = m
        load[m] += weight[i]
    return owner


class Sharding:
    """One optimizer's ownership and the steps around the wrapped step.

    Args:
        optimizer: the distributed optimizer (its param_groups are the wrapped optimizer's).
        members: the process set's global ranks.
        me: this rank's global rank.
        process_set: the set.
    """

    def __init__(self, optimizer, members, me, process_set):
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.owner = partition(self.params, list(members))
        self.members, self.me, self.process_set = list(members), me, process_set
        # What each step broadcasts, decided once: per owner, its parameters by dtype (one flat broadcast each).
        self._sends = []
        for r in self.members:
            by_dtype = {}
            for p in self.params:
                if self.owner[p] == r:
                    by_dtype.setdefault(p.dtype, []).append(p)
            self._sends += [(r, dtype, params) for dtype, params in by_dtype.items()]

    def owns(self, p):
        """Whether this rank updates p (and keeps its state)."""
        return self.owner[p] == self.me

    def step(self, optimizer, wrapped_step, closure):
        """The wrapped step on this rank's parameters, then every parameter from its owner.

        Args:
            optimizer: the distributed optimizer.
            wrapped_step: the wrapped optimizer's step.
            closure: passed to it.

        Returns:
            What the wrapped step returns.
        """
        saved = [group["params"] for group in optimizer.param_groups]
        for group in optimizer.param_groups:
            group["params"] = [p for p in group["params"] if self.owns(p)]
        try:
            result = wrapped_step(closure)
        finally:
            for group, params in zip(optimizer.param_groups, saved):
                group["params"] = params
        self.share()
        return result

    def share(self):
        """Every parameter from its owner: one broadcast per owner and dtype of its parameters, flattened."""
        with torch.no_grad():
            for r, dtype, params in self._sends:
                if r == self.me:
                    flat = torch.cat([p.reshape(-1) for p in params])
                else:
                    flat = torch.empty(sum(p.numel() for p in params), dtype=dtype, device=params[0].device)
                broadcast_(flat, root_rank=r, name="sharded.params.%d.%s" % (r, str(dtype).split(".")[-1]),
                           process_set=self.process_set)
                if r != self.me:
                    offset = 0
                    for p in params:
                        p.copy_(flat[offset:offset + p.numel()].view_as(p))
                        offset += p.numel()

    def full_state(self, state_dict):
        """The unsharded layout of a wrapped state_dict(): every member's state entries merged (a collective).

        Args:
            state_dict: this rank's state_dict() (its "state" holds its parameters' entries, by position).

        Returns:
            dict: the state_dict with every parameter's state (the set's first rank's entries winning where a
            load kept more than a rank's part; its hyperparameters, which every rank shares).
        """
        return merged_state(state_dict, members_of(self.process_set)[0], self.process_set)

    def drop_others(self, state):
        """Forgets the state of the parameters this rank does not own (after loading an unsharded layout)."""
        for p in self.params:
            if not self.owns(p):
                state.pop(p, None)


def merged_state(local, root_rank, process_set):
    """broadcast_optimizer_state's source for a sharded optimizer (a collective of the set): every parameter's state
    from the rank that holds it, the root's entries winning (after a load on the root alone it holds them all), and
    the root's hyperparameters.

    Args:
        local: this rank's own state_dict() (its "state" holds the entries it keeps, by position).
        root_rank: the global rank whose hyperparameters and entries win.
        process_set: the set the optimizer is sharded over.

    Returns:
        dict: a state_dict in the unsharded layout.
    """
    members = members_of(process_set)
    if root_rank not in members:
        raise ValueError("broadcast_optimizer_state: root_rank %r is not a rank of the sharded optimizer's set %s"
                         % (root_rank, members))
    parts = allgather_object((local["state"], local["param_groups"]), name="sharded.state", process_set=process_set)
    root = members.index(root_rank)
    merged = {}
    for i, (state, _) in enumerate(parts):
        if i != root:
            merged.update(state)
    merged.update(parts[root][0])
    return {"state": dict(sorted(merged.items())), "param_groups": parts[root][1]}
