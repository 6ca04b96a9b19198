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
        self.settled = False  # whether the gradients were settled since the last zero_grad()

    def reset(self):
        self.in_flight.clear()
        self.current = self.settled = False

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
                    owned.append(p)
            else:
                p.grad = None
        local = any(not _finite(_values(p.grad)) for p in owned)
        flag = torch.tensor([1.0 if local else 0.0])
        allreduce_(flag, name="sharded.found_inf", op=Max, process_set=opt.process_set)
        if flag.item() and not local:
            _poison(owned)
        self.settled = True


def _values(grad):
    """The stored values of a gradient (a sparse one's, coalesced)."""
    return grad.coalesce()._values() if grad.is_sparse else grad


def _finite(values):
    """Whether every value is finite. A sum is non-finite when a value is, or when it overflows: one read of the
    values (isfinite().all() also writes a mask: 45 ms a step on 25 M float32 weights, one thread), and the exact
    check only then."""
    if not values.numel():
        return True
    wide = torch.float64 if values.dtype == torch.float64 else torch.float32
    return bool(torch.isfinite(values.sum(dtype=wide))) or bool(torch.isfinite(values).all())


def _poison(owned):
    """Makes one value of this rank's owned gradients NaN (a dense one's first, else a sparse one's, coalesced)."""
    with torch.no_grad():
        for p in sorted(owned, key=lambda p: p.grad.is_sparse):
            if p.grad.is_sparse:
                p.grad = p.grad.coalesce()
            values = _values(p.grad)
            if values.numel():
                values[(0,) * values.dim()] = float("nan")
                return


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
    elif norm_type == 0:  # (a count of the non-zero values: the parts add up)
        total = allreduce_(local, name="sharded.clip_norm", op=Sum, process_set=optimizer.process_set)[0]
    else:
        total = allreduce_(local ** norm_type, name="sharded.clip_norm", op=Sum,
                           process_set=optimizer.process_set)[0] ** (1.0 / norm_type)
    # As torch's: on the gradients' device, in their dtype where they share one (else float32).
    like = grads[0] if grads and all(g.dtype == grads[0].dtype for g in grads) else None
    total = total.to(dtype=like.dtype if like is not None else torch.float32,
                     device=like.device if like is not None else "cpu")
    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError("clip_grad_norm_: the total norm of order %s of the gradients is non-finite (%s), so it "
                           "cannot be clipped; error_if_nonfinite=False clips anyway" % (norm_type, total.item()))
    if owned:
        torch.nn.utils.clip_grads_with_norm_(owned, max_norm, total, foreach)
    return total
