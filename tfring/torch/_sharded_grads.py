"""ZeRO stage 2 for tfring.torch.DistributedOptimizer (`sharded=2`): stage 1's whole-parameter ownership, and a
rank keeps the reduced gradients of the parameters it owns only. A gradient the rank does not own is dropped as
soon as its reduction has finished, polled while backward goes on, so the whole gradient is never held at once
when the reductions keep pace with backward. What then reads only a part of the gradients is made to agree over
the set: the norm clipped by `clip_grad_norm_`, and whether any reduced gradient is non-finite (which decides a
GradScaler's skipped step on every rank)."""
from collections import deque

import torch

from tfring.torch.mpi_ops import Max, Sum, allreduce_, poll, synchronize

FREED = object()  # a handle's place once its non-owned result is dropped


class GradShards:
    """Stage 2's per-step bookkeeping for one distributed optimizer.

    Args:
        optimizer: the distributed optimizer (its `_handles`, `_current_sharding()` and `process_set`).
    """

    def __init__(self, optimizer):
        self.opt = optimizer
        self.in_flight = deque()  # non-owned parameters whose reduction was submitted, oldest first
        self.current = False  # whether ownership was decided for this step

    def reset(self):
        self.in_flight.clear()
        self.current = False

    def sharding(self):
        """The optimizer's sharding for the set's members now, decided once a step (an elastic reset changes them
        between steps)."""
        if not self.current:
            self.opt._current_sharding()
            self.current = True
        return self.opt._sharding

    def submitted(self, p):
        """After p's reduction was submitted in a backward hook: frees every non-owned result that has finished
        (oldest first; a still-running one stops the scan: the core finishes them in about that order)."""
        opt = self.opt
        if not self.sharding().owns(p):
            self.in_flight.append(p)
        while self.in_flight:
            q = self.in_flight[0]
            handle = opt._handles.get(q, (None, None))[0]
            if handle is not None and handle is not FREED:
                if callable(handle) or not poll(handle):
                    return
                synchronize(handle)  # releases the core's reference to the tensor it reduced in place
                opt._handles[q] = (FREED, None)
            self.in_flight.popleft()
            q.grad = None

    def settle(self, params):
        """At the end of synchronize(): only owned gradients stay; a non-finite value in any rank's owned gradients
        makes one value of every rank's owned gradients non-finite too (a GradScaler then skips the step on every
        rank, as unsharded, where every rank holds every reduced gradient).

        Args:
            params: the optimizer's parameters that take gradients.
        """
        opt, sharding = self.opt, self.sharding()
        self.reset()
        owned = []
        for p in params:
            if sharding.owns(p):
                if p.grad is not None:
                    owned.append(p.grad)
            else:
                p.grad = None
        # A sum is non-finite iff a value is (or the sum passes float32's 3e38): one read of the owned gradients,
        # where isfinite().all() also wrote a mask of them (45 ms a step on 25 M float32 weights, one thread).
        sums = [(g.coalesce()._values() if g.is_sparse else g).sum(dtype=torch.float32) for g in owned]
        local = bool(sums) and not bool(torch.isfinite(torch.stack(sums)).all())
        flag = torch.tensor([1.0 if local else 0.0])
        allreduce_(flag, name="sharded.found_inf", op=Max, process_set=opt.process_set)
        target = next((g for g in owned if not g.is_sparse and g.numel()), None)
        if flag.item() and not local and target is not None:
            with torch.no_grad():
                target.view(-1)[0] = float("nan")


def clip_grad_norm_(optimizer, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """torch.nn.utils.clip_grad_norm_ over every gradient of a distributed optimizer, sharded or not: the total norm
    of the reduced gradients, the same on every rank of the set (sharded=2 sums each rank's owned part).

    Args:
        optimizer: the distributed optimizer, synchronized (its gradients reduced).
        max_norm, norm_type, error_if_nonfinite, foreach: as torch.nn.utils.clip_grad_norm_.

    Returns:
        torch.Tensor: the total norm before clipping.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if optimizer._grad_shards is None:
        return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite, foreach)
    norm_type = float(norm_type)
    owned = [p for p in params if p.grad is not None]
    grads = [p.grad for p in owned]
    local = (torch.nn.utils.get_total_norm(grads, norm_type, False, foreach) if grads else torch.tensor(0.0))
    local = local.detach().to(torch.float64).reshape(1).cpu()
    if norm_type == float("inf"):
        total = allreduce_(local, name="sharded.clip_norm", op=Max, process_set=optimizer.process_set)[0]
    else:
        total = allreduce_(local ** norm_type, name="sharded.clip_norm", op=Sum,
                           process_set=optimizer.process_set)[0] ** (1.0 / norm_type)
    total = total.to(torch.float32)
    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError("clip_grad_norm_: the total norm of order %s of the gradients is non-finite (%s), so it "
                           "cannot be clipped; error_if_nonfinite=False clips anyway" % (norm_type, total.item()))
    if owned:
        torch.nn.utils.clip_grads_with_norm_(owned, max_norm, total, foreach)
    return total
