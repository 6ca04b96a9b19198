"""`DistributedOptimizer` (Horovod's `horovod.torch.DistributedOptimizer`): each gradient's allreduce starts as soon
as backward has accumulated it, overlapping communication with the rest of backward; `step()` waits for them all.

    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
"""
import os
import warnings
import weakref
from contextlib import contextmanager

import torch

from tfring.common import powersgd
from tfring.torch._adasum_optimizer import DistributedAdasumOptimizer
from tfring.torch._optimizer_args import check_groups, parameter_names, split_list
from tfring.torch._powersgd import eager_state
from tfring.torch._sharded import Sharding, members_of, merged_state
from tfring.torch._sharded_grads import FREED, GradShards, clip_grad_norm_
from tfring.torch.compression import Compression
from tfring.torch.mpi_ops import (Adasum, Average, Sum, allreduce_async_, global_process_set, grouped_allreduce_,
                                  grouped_allreduce_async_, rank, size, sparse_allreduce_async, synchronize)

_REPEATED_BACKWARD = ("Gradients were computed more than backward_passes_per_step times before call to step(). "
                      "Increase backward_passes_per_step to accumulate gradients locally.")


class _DistributedOptimizer:
    """Mixed in front of the wrapped optimizer's class: `DistributedOptimizer` builds the instances."""

    def _tfring_init(self, named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                     groups, sparse_as_dense, process_set, sharded=0):
        self._compression = compression
        # PowerSGD: the hooks only count; synchronize() runs its two grouped rounds over every gradient.
        self._powersgd = None if powersgd.settings(compression) is None else eager_state(compression)
        self._parameter_names = parameter_names(self.param_groups, named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in self._parameter_names}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        # Key: a parameter, or a tuple of them (a submitted group). Value: (handle or None until submitted, ctx).
        self._handles = {}
        self._hook_handles = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}
        if process_set.included() and (size() > 1 or os.environ.get("TFRING_ELASTIC") == "1"):
            self._register_hooks()
        self._sharding = self._grad_shards = None
        if sharded and process_set.included():
            self._sharding = Sharding(self, members_of(process_set), rank(), process_set)
            self._sharding.drop_others(self.state)  # state made before wrapping: this rank's part only
            self._grad_shards = GradShards(self) if sharded == 2 else None
            if sharded == 2 and not any(p.requires_grad and self._sharding.owns(p) for p in self._sharding.params):
                warnings.warn("DistributedOptimizer(sharded=2): rank %d owns no trainable parameter (%d trainable "
                              "over %d ranks), so it holds no gradient: a GradScaler there has nothing to check "
                              "(torch raises 'No inf checks were recorded'); sharded=1 holds every gradient" % (
                                  rank(), sum(p.requires_grad for p in self._sharding.params),
                                  len(self._sharding.members)))

    def state_dict(self, *args, **kwargs):
        """The wrapped optimizer's state_dict; sharded, every rank's part gathered into the unsharded layout (every
        rank of the set must call it)."""
        sd = super().state_dict(*args, **kwargs)
        return sd if self._sharding is None else self._sharding.full_state(sd)

    def own_state_dict(self):
        """The wrapped optimizer's state_dict as this rank holds it (sharded: its part; no collective)."""
        return super().state_dict()

    def load_state_dict(self, *args, **kwargs):
        """Loads the wrapped optimizer's state, forgetting gradients of an unfinished step."""
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        self._reset_counts()
        if self._grad_shards is not None:
            self._grad_shards.reset()
        # Sharded, every entry is kept until this rank's part is known for sure (the next step or
        # broadcast_optimizer_state): an elastic rollback loads the commit before the job has shrunk.
        return super().load_state_dict(*args, **kwargs)

    def _broadcast_sharded_state(self, root_rank):
        """broadcast_optimizer_state of a sharded optimizer: the whole state (each part from its holder, the root's
        winning) reaches every rank, which keeps its part under the ownership of the set's members now."""
        self.load_state_dict(merged_state(self.own_state_dict(), root_rank, self._sharding.process_set))
        self._current_sharding()

    def _current_sharding(self):
        """The sharding for the set's members now (an elastic reset changes them: ownership is decided again),
        having dropped the state of the parameters this rank does not own."""
        members, me = members_of(self._sharding.process_set), rank()
        if members != self._sharding.members or me != self._sharding.me:
            self._sharding = Sharding(self, members, me, self._sharding.process_set)
        self._sharding.drop_others(self.state)
        return self._sharding

    def set_backward_passes_per_step(self, passes):
        """Changes how many backward passes accumulate before each allreduce.

        Args:
            passes: int > 0.
        """
        self.backward_passes_per_step = passes
        self._reset_counts()

    def _reset_counts(self):
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        for group in self._group_counts:
            self._group_counts[group] = 0

    def _register_hooks(self):
        params = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        if self._groups is not None:
            self._form_groups(params)
        ref = weakref.ref(self)
        for p in params:
            self._requires_update.add(p)
            self._hook_handles.append(p.register_post_accumulate_grad_hook(_make_hook(ref, p)))

    def _form_groups(self, params):
        # Root's parameter order decides the groups, so every rank forms the same ones (as Horovod).
        from tfring.torch.functions import broadcast_object
        ranks = getattr(self.process_set, "ranks", None)
        root = min(ranks) if ranks else 0
        order = broadcast_object([self._parameter_names[p] for p in params], root_rank=root,
                                 name="DistributedOptimizer.groups", process_set=self.process_set)
        position = {name: i for i, name in enumerate(order)}
        missing = [self._parameter_names[p] for p in params if self._parameter_names[p] not in position]
        if missing:
            raise ValueError("groups: parameters %s are not in rank %d's optimizer: every rank must build the same "
                             "model and optimizer" % (", ".join(missing), root))
        params = sorted(params, key=lambda p: position[self._parameter_names[p]])
        if isinstance(self._groups, list):
            listed = {id(p) for group in self._groups for p in group}
            wanted = {id(p) for p in params}
            p_groups = [[p for p in group if id(p) in wanted] for group in self._groups]
            p_groups = [g for g in p_groups if g] + [[p] for p in params if id(p) not in listed]
        else:
            p_groups = [g for g in split_list(params, self._groups) if g]
        for group in map(tuple, p_groups):
            for p in group:
                self._p_to_group[p] = group
            self._group_counts[group] = 0

    def _scale_factors(self):
        if self.op == Average:
            # The core divides by the set's size after the sum (Average); predivide moves part of it before.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _ensure_grad(self, p):
        if p.grad is None:
            # Not computed here (a branch this rank skipped), but other ranks may have one: reduce zeros.
            p.grad = torch.zeros_like(p, memory_format=torch.preserve_format)
        return p.grad

    def _allreduce_grad_async(self, p):
        name = self._parameter_names[p]
        tensor = self._ensure_grad(p)
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                return self._sparse_allreduce_grad_async(tensor, name), None
            tensor = tensor.to_dense()
        compressed, ctx = self._compression.compress(tensor)
        prescale, postscale = self._scale_factors()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=prescale,
                                  postscale_factor=postscale, process_set=self.process_set)
        return handle, ctx

    def _grouped_allreduce_grad_async(self, group):
        grads = []
        for p in group:
            grad = self._ensure_grad(p)
            if grad.is_sparse:
                if not self.sparse_as_dense:
                    raise ValueError("groups: parameter %r has a sparse gradient; grouped allreduces take dense "
                                     "ones (pass sparse_as_dense=True)" % self._parameter_names[p])
                grad = grad.to_dense()
            grads.append(grad)
        compressed, ctxs = zip(*[self._compression.compress(g) for g in grads])
        prescale, postscale = self._scale_factors()
        handle = grouped_allreduce_async_(list(compressed), name=self._parameter_names[group[0]], op=self.op,
                                          prescale_factor=prescale, postscale_factor=postscale,
                                          process_set=self.process_set)
        return handle, ctxs

    def _sparse_allreduce_grad_async(self, grad, name):
        if self.op not in (Average, Sum):
            raise ValueError("op=%r: sparse gradients are reduced with Average or Sum only; pass sparse_as_dense=True"
                             % (self.op,))
        return sparse_allreduce_async(grad, name=name, op=self.op, process_set=self.process_set)

    def _on_grad_ready(self, p):
        if self._allreduce_delay[p] <= 0:
            raise AssertionError(_REPEATED_BACKWARD)
        self._allreduce_delay[p] -= 1
        if self._allreduce_delay[p] > 0 or self._powersgd is not None:
            self._handles[p] = (None, None)
            return
        if self._groups is None:
            self._handles[p] = self._allreduce_grad_async(p)
            if self._grad_shards is not None:
                self._grad_shards.submitted(p)
            return
        group = self._p_to_group[p]
        self._group_counts[group] += 1
        if self._group_counts[group] == len(group):
            self._handles[group] = self._grouped_allreduce_grad_async(group)
            for gp in group:
                self._handles.pop(gp, None)
        else:
            self._handles[p] = (None, None)

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those not started yet) and writes the results into
        `.grad`.

        Call it before changing gradients in place (clipping), then `step()` inside `skip_synchronize()`.
        Every rank of the process set must call it (step() does).
        """
        if not self.process_set.included():
            self._synchronized = True
            return
        if self._grad_shards is not None and self._grad_shards.settled and not self._handles:
            # No backward and no zero_grad() since the last one: reducing again would average each owned gradient
            # with the others' zeros. (After zero_grad() a rank without gradients still reduces its zeros.)
            return
        if self._powersgd is not None:
            try:
                self._powersgd_synchronize()
            finally:
                self._handles.clear()
                self._reset_counts()
            self._synchronized = True
            return
        # Parameters without a finished allreduce yet (unused this step, or fewer backward passes than
        # backward_passes_per_step) are reduced now; a group always travels whole, under the same name on every rank.
        if self._groups is not None:
            for group in self._group_counts:
                if group not in self._handles:
                    for p in group:
                        self._handles.pop(p, None)
                    self._handles[group] = self._grouped_allreduce_grad_async(group)
        else:
            for p in self._requires_update:
                if self._handles.get(p, (None, None))[0] is None:
                    self._handles[p] = self._allreduce_grad_async(p)
        try:
            for key, (handle, ctx) in self._handles.items():
                if handle is FREED:
                    continue
                if isinstance(key, tuple):
                    for p, out, c in zip(key, synchronize(handle), ctx):
                        self._write_grad(p, self._compression.decompress(out, c))
                else:
                    out = handle() if callable(handle) else synchronize(handle)
                    self._write_grad(key, out if callable(handle) else self._compression.decompress(out, ctx))
        finally:
            self._handles.clear()
            self._reset_counts()
            if self._grad_shards is not None:
                self._grad_shards.reset()  # (after a failure too: no stale ownership or in-flight entries)
        if self._grad_shards is not None:
            self._grad_shards.settle(self._requires_update)
        self._synchronized = True

    def clip_grad_norm_(self, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
        """Clips the reduced gradients by their total norm, as torch.nn.utils.clip_grad_norm_ on every parameter
        (synchronizing first if step() has not): the one to call with sharded=2, where a rank holds its own part of
        the gradients only and torch's function would see the norm of that part. Every rank of the set must call it.

        Returns:
            torch.Tensor: the total norm before clipping, the same on every rank.
        """
        if not self._synchronized:
            self.synchronize()
        return clip_grad_norm_(self, max_norm, norm_type, error_if_nonfinite, foreach)

    def _powersgd_synchronize(self):
        params = [p for group in self.param_groups for p in group["params"] if p in self._requires_update]
        grads = []
        for p in params:
            grad = self._ensure_grad(p)
            if grad.is_sparse:
                if not self.sparse_as_dense:
                    raise ValueError("compression=PowerSGD: parameter %r has a sparse gradient; pass "
                                     "sparse_as_dense=True" % self._parameter_names[p])
                grad = p.grad = grad.to_dense()
            grads.append(grad if grad.is_contiguous() else grad.contiguous())
        prescale, postscale = self._scale_factors()
        rounds = iter(("powersgd.P", "powersgd.Q"))

        def allreduce(tensors):
            # In place: the round's tensors are fresh products, or the gradients themselves.
            name = next(rounds)
            return grouped_allreduce_(tensors, name=name, op=self.op, prescale_factor=prescale,
                                      postscale_factor=postscale, process_set=self.process_set) if tensors else []
        keys = [self._parameter_names[p] for p in params]
        for p, out in zip(params, self._powersgd.reduce(keys, grads, allreduce)):
            self._write_grad(p, out)

    @staticmethod
    def _write_grad(p, result):
        if p.grad.is_sparse:
            # Sparse tensors have no copy_ from dense; the grad is replaced.
            p.grad = result if result.is_sparse else result.to_sparse()
        elif result is not p.grad:
            p.grad.copy_(result)

    @contextmanager
    def skip_synchronize(self):
        """Context in which `step()` does not synchronize: after an explicit `synchronize()`.

        Example:
            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        """Synchronizes the gradients (unless inside `skip_synchronize()`), then runs the wrapped optimizer's step.

        Args:
            closure: passed to the wrapped optimizer's step.

        Returns:
            What the wrapped optimizer's step returns.
        """
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
                              "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in your "
                              "code.")
            self.synchronize()
        self._synchronized = False
        if self._sharding is not None:
            return self._current_sharding().step(self, super().step, closure)
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        """The wrapped optimizer's zero_grad; refused while gradients are being reduced.

        Raises:
            AssertionError: called after backward() but before step() or synchronize().
        """
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before optimizer.step() "
                                 "or optimizer.synchronize(). This is prohibited as it can cause a race condition.")
        if self._grad_shards is not None:
            self._grad_shards.settled = False
        return super().zero_grad(*args, **kwargs)


def _make_hook(optimizer_ref, p):
    # A weak reference: an optimizer dropped by the user neither stays alive nor keeps reducing gradients.
    def hook(_):
        optimizer = optimizer_ref()
        if optimizer is not None:
            optimizer._on_grad_ready(p)
    return hook


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set, sharded=False):
    """Wraps a torch optimizer so that gradients are averaged over the ranks before each step.

    Each parameter's allreduce starts as soon as backward has accumulated its gradient; `step()` waits for them,
    writes the results into `.grad` and runs the wrapped step. The result is an instance of a subclass of the
    optimizer's class sharing its `param_groups`, `state` and hyperparameters.

    Args:
        optimizer: a `torch.optim.Optimizer` (created on the model's parameters).
        named_parameters: `model.named_parameters()`: names the allreduces, which ranks match by (default: the
            parameters' positions in the optimizer).
        compression: `Compression.none` (default), `.fp16` or `.bf16` (gradients travel as that 16-bit float), or
            `Compression.powersgd(rank, warmup_steps, min_size)`: a rank-r approximation with error feedback (two
            grouped allreduces in step(), after backward; docs/compression.md). PowerSGD takes op=Average or Sum
            and no groups.
        backward_passes_per_step: backward passes accumulated locally before each allreduce (and step).
        op: `Average` (default), `Sum`, `Min`, `Max`, `Product`, or `Adasum`: then each rank steps on its own
            gradients and the parameters' changes are combined with Adasum (Horovod's delta optimizer; a
            power-of-two number of ranks; `groups` and `sparse_as_dense` do not apply).
        gradient_predivide_factor: with Average, gradients are divided by this before the sum and by size/this
            after it.
        num_groups: deprecated spelling of an int `groups`.
        groups: an int (that many contiguous groups of parameters, one grouped allreduce each) or a list of lists
            of parameters (one grouped allreduce per list; every other parameter alone).
        sparse_as_dense: reduce sparse gradients as dense tensors (then back to sparse).
        process_set: the `ProcessSet` to reduce over (default: all ranks).
        sharded: True (or 1): ZeRO stage 1, as torch's ZeroRedundancyOptimizer: each rank of the set keeps the
            wrapped optimizer's state for the whole parameters it owns and updates only those, then sends them to
            the others; `state_dict()` gathers the unsharded layout (every rank must call it) and
            `load_state_dict` takes any layout (docs/sharded-optimizer.md). Not with op=Adasum. 2: ZeRO stage 2,
            stage 1 where a rank also keeps only its own parameters' reduced gradients (the others' are dropped
            as their allreduces end, during backward): clip with `optimizer.clip_grad_norm_`, not torch's
            function, which would see this rank's part only. Not with groups or PowerSGD.

    Returns:
        The distributed optimizer (`isinstance` of the given optimizer's class).

    Raises:
        ValueError: bad named_parameters (not (name, tensor) tuples, duplicate names, optimizer parameters left
            unnamed), groups, backward_passes_per_step <= 0, gradient_predivide_factor with an op other than
            Average, or an optimizer that is already distributed.
        NotImplementedError: op=Adasum over a number of ranks that is not a power of two.
    """
    if isinstance(optimizer, (_DistributedOptimizer, DistributedAdasumOptimizer)):
        raise ValueError("DistributedOptimizer: the optimizer is already a DistributedOptimizer")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError("DistributedOptimizer: expected a torch.optim.Optimizer, got %s" % type(optimizer).__name__)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None:
        check_groups(groups)
    if isinstance(sharded, bool) and sharded:
        sharded = 1
    if sharded not in (False, None, 0, 1, 2) or isinstance(sharded, float):
        raise ValueError("DistributedOptimizer: sharded=%r must be False, True or 1 (ZeRO stage 1), or 2 (stage 2)"
                         % (sharded,))
    if sharded == 2 and (groups or num_groups or powersgd.settings(compression) is not None):
        raise ValueError("DistributedOptimizer: sharded=2 does not combine with %s (stage 2 drops each gradient a "
                         "rank does not own as soon as its own allreduce ends; sharded=1 takes it)" % (
                             "compression=%r" % (compression,) if powersgd.settings(compression) is not None
                             else "groups=%r" % (groups or num_groups,)))
    if sharded and op == Adasum:
        raise ValueError("DistributedOptimizer: sharded=%r does not combine with op=Adasum" % (sharded,))
    if powersgd.settings(compression) is not None and (groups or op not in (Average, Sum)):
        raise ValueError("DistributedOptimizer: compression=%r does not combine with %s" % (
            compression, "groups=%r" % (groups,) if groups else "op=%s (Average or Sum only: the approximation is of "
            "a sum)" % ("Adasum" if op == Adasum else op)))
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    process_set = global_process_set if process_set is None else process_set
    base = type(optimizer)
    mixin = DistributedAdasumOptimizer if op == Adasum else _DistributedOptimizer
    cls = type(base.__name__, (mixin, base), {"__module__": __name__})
    distributed = cls.__new__(cls)
    # Share the wrapped optimizer's attributes (param_groups, state, defaults, hooks) instead of running its
    # __init__ again: optimizers with required arguments and state loaded before wrapping both keep working.
    # Instance-level methods (an LR scheduler's step wrapper bound to the original) are left behind.
    distributed.__dict__.update({k: v for k, v in optimizer.__dict__.items() if not hasattr(mixin, k)})
    if op == Adasum:
        distributed._tfring_adasum_init(parameter_names(distributed.param_groups, named_parameters), compression,
                                        backward_passes_per_step, process_set)
        return distributed
    distributed._tfring_init(named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                             groups, sparse_as_dense, process_set, int(sharded or 0))
    return distributed
