"""Data-parallel training for MXNet: `DistributedOptimizer` (Module / raw optimizer API), `DistributedTrainer`
(Gluon) and `broadcast_parameters` (Horovod's `horovod.mxnet`). Gradients are averaged with in-place
allreduces pushed into MXNet's engine, so the optimizer's update waits for them like for any operator."""
import types
import warnings
from collections import OrderedDict, defaultdict

import mxnet as mx
import numpy as np

from tfring.common import powersgd
from tfring.mxnet._powersgd import MXNetLinearAlgebra, from_numpy
from tfring.mxnet.compression import Compression
from tfring.mxnet.mpi_ops import Average, allreduce_, broadcast_, global_process_set, grouped_allreduce_, size


def _split_list(items, num_groups):
    """`items` cut into at most num_groups contiguous groups of near-equal length (Horovod's split_list)."""
    n = len(items)
    num_groups = max(1, min(num_groups, n))
    base, extra = divmod(n, num_groups)
    out, start = [], 0
    for g in range(num_groups):
        end = start + base + (1 if g < extra else 0)
        out.append(items[start:end])
        start = end
    return out


class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wraps an mx.optimizer.Optimizer: each gradient is averaged over the process set before the update.

    Args:
        optimizer: the optimizer to wrap.
        gradient_predivide_factor: gradients are scaled by 1 / factor before the sum and factor / size after.
        num_groups: > 0 fuses the gradients of a multi-index update into that many grouped allreduces.
        process_set: the ranks that average gradients (default: all).
    """

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0, process_set=global_process_set):
        # The base class is not initialized: every attribute is read from the wrapped optimizer (__getattr__).
        self._optimizer = optimizer
        self._gradient_predivide_factor = gradient_predivide_factor
        self._num_groups = num_groups
        self._process_set = process_set

    def __getattr__(self, item):
        return getattr(self._optimizer, item)

    def create_state(self, index, weight):
        return self._optimizer.create_state(index, weight)

    def create_state_multi_precision(self, index, weight):
        return self._optimizer.create_state_multi_precision(index, weight)

    def _do_allreduce(self, index, grad):
        if self._process_set.size() == 1:
            return
        scale = dict(op=Average, prescale_factor=1.0 / self._gradient_predivide_factor,
                     postscale_factor=self._gradient_predivide_factor, process_set=self._process_set)
        if isinstance(index, (tuple, list)):
            if self._num_groups > 0:
                groups = zip(_split_list(list(grad), self._num_groups), _split_list(list(index), self._num_groups))
                for i, (grads, indices) in enumerate(groups):
                    grouped_allreduce_(grads, name="%s:%s" % (indices[0], indices[-1]), priority=-i, **scale)
            else:
                for i in range(len(index)):
                    allreduce_(grad[i], name=str(index[i]), priority=-i, **scale)
        else:
            allreduce_(grad, name=str(index), **scale)

    def update(self, index, weight, grad, state):
        """Averages `grad` over the process set, then runs the wrapped optimizer's update."""
        if self._process_set.included():
            self._do_allreduce(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        """`update` for multi-precision training."""
        if self._process_set.included():
            self._do_allreduce(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    def set_learning_rate(self, lr):
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult):
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        self._optimizer.set_wd_mult(args_wd_mult)


class DistributedTrainer(mx.gluon.Trainer):
    """A gluon.Trainer whose gradients are averaged over the process set with tfring allreduce (no kvstore).

    Args:
        params: the parameters to train (ParameterDict, dict or list).
        optimizer: an optimizer name or mx.optimizer.Optimizer (a DistributedOptimizer is unwrapped).
        optimizer_params: the optimizer's arguments.
        compression: `Compression.none` or `Compression.fp16`, applied to what is sent, or
            `Compression.powersgd(rank, warmup_steps, min_size)`: a rank-r approximation with error feedback (two
            grouped allreduces per step; docs/compression.md); not with num_groups.
        gradient_predivide_factor: gradients are scaled by 1 / factor before the sum and factor / size after.
        prefix: prefix of the tensor names (distinct per trainer when a program has several).
        num_groups: > 0 fuses the gradients into that many grouped allreduces (per dtype).
        process_set: the ranks that average gradients (default: all).
    """

    def __init__(self, params, optimizer, optimizer_params=None, compression=Compression.none,
                 gradient_predivide_factor=1.0, prefix=None, num_groups=0, process_set=global_process_set):
        if powersgd.settings(compression) is not None and num_groups:
            raise ValueError("tfring.mxnet.DistributedTrainer: compression=%r does not combine with num_groups=%r "
                             "(PowerSGD groups its two rounds itself)" % (compression, num_groups))
        # PowerSGD's state (each compressed gradient's Q and error) lives here, between steps.
        self._powersgd = None if powersgd.settings(compression) is None else powersgd.EagerState(
            compression, MXNetLinearAlgebra, from_numpy, mx.nd.zeros_like, lambda t, shape: t.reshape(shape))
        self._compression = compression
        self._process_set = process_set
        if isinstance(optimizer, DistributedOptimizer):
            optimizer = optimizer._optimizer
            warnings.warn("DistributedTrainer does not take DistributedOptimizer as its optimizer. "
                          "We have unwrapped it for you.")
        # The same parameter order on every rank: tensor names are the positions.
        if isinstance(params, dict):
            params = OrderedDict(params)
        elif isinstance(params, (list, tuple)):
            params = sorted(params, key=lambda p: p.name)
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._gradient_predivide_factor = gradient_predivide_factor
        if prefix is not None and not isinstance(prefix, str):
            raise ValueError("tfring.mxnet.DistributedTrainer: prefix must be a string, got %r" % (prefix,))
        self._prefix = prefix or ""
        self._num_groups = num_groups

    def _allreduce_grads(self):
        # Called by Trainer.step / allreduce_grads in place of the kvstore's push / pull.
        if self._process_set.size() == 1 or not self._process_set.included():
            return
        scale = dict(op=Average, prescale_factor=1.0 / self._gradient_predivide_factor,
                     postscale_factor=self._gradient_predivide_factor, process_set=self._process_set)
        if self._powersgd is not None:
            self._powersgd_allreduce(scale)
            return
        entries = []  # (index, param, compressed gradient, compression context)
        for i, param in enumerate(self._params):
            if param.grad_req != "null":
                compressed, ctx = self._compression.compress(param.list_grad()[0])
                entries.append((i, param, compressed, ctx))
        if self._num_groups > 0:
            for g, group in enumerate(_split_list(entries, self._num_groups)):
                by_dtype = defaultdict(list)  # one grouped allreduce per dtype: a fused buffer has one dtype
                for e in group:
                    by_dtype[e[2].dtype].append(e)
                for same in by_dtype.values():
                    name = "%s%d:%s%d" % (self._prefix, same[0][0], self._prefix, same[-1][0])
                    grouped_allreduce_([e[2] for e in same], name=name, priority=-g, **scale)
        else:
            for i, _, compressed, _ in entries:
                allreduce_(compressed, name=self._prefix + str(i), priority=-i, **scale)
        if self._compression is not Compression.none:
            for _, param, compressed, ctx in entries:
                param.list_grad()[0][:] = self._compression.decompress(compressed, ctx)


    def _powersgd_allreduce(self, scale):
        params = [p for p in self._params if p.grad_req != "null"]
        grads = [p.list_grad()[0] for p in params]
        rounds = iter(("powersgd.P", "powersgd.Q"))

        def allreduce(tensors):
            # In place, one grouped allreduce per dtype (a fused buffer has one), in MXNet's engine.
            name = self._prefix + next(rounds)
            by_dtype = defaultdict(list)
            for t in tensors:
                by_dtype[np.dtype(t.dtype).name].append(t)
            for dtype, same in sorted(by_dtype.items()):
                grouped_allreduce_(same, name="%s.%s" % (name, dtype), **scale)
            return list(tensors)
        # Keyed by name: a parameter frozen later does not hand its Q and error to the next one.
        for grad, out in zip(grads, self._powersgd.reduce([p.name for p in params], grads, allreduce)):
            if out is not grad:
                grad[:] = out


def _append_broadcast_init(param, root_rank, name):
    """`param._init_impl` that broadcasts the value once a deferred initialization ran."""
    init_impl = param._init_impl

    def wrapped_init_impl(self, *args, **kwargs):
        init_impl(*args, **kwargs)
        broadcast_(self.data(), root_rank=root_rank, name=name)
    return wrapped_init_impl


def broadcast_parameters(params, root_rank=0, prefix=None):
    """Copies root_rank's parameters into every rank's (in place; pushed into MXNet's engine).

    Args:
        params: a dict of name -> NDArray or gluon Parameter, or a gluon ParameterDict (e.g.
            `net.collect_params()` or `Module.get_params()[0]`). Parameters whose initialization is deferred are
            broadcast when it runs.
        root_rank: the rank whose values everyone gets.
        prefix: prefix of the tensor names (distinct per call site when a program has several).

    Raises:
        ValueError: `params` is of another type.
    """
    if size() == 1:
        return
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError("tfring.mxnet.broadcast_parameters: prefix must be a string, got %r" % (prefix,))
    prefix = prefix or ""
    valid = (dict, mx.gluon.parameter.ParameterDict)
    if not isinstance(params, valid):
        raise ValueError("tfring.mxnet.broadcast_parameters: invalid params of type %s" % type(params).__name__)
    tensors = []
    for name, p in sorted(params.items()):
        try:
            tensors.append((p.data() if isinstance(p, mx.gluon.parameter.Parameter) else p, prefix + str(name)))
        except mx.gluon.parameter.DeferredInitializationError:
            p._init_impl = types.MethodType(_append_broadcast_init(p, root_rank, prefix + str(name)), p)
    for tensor, name in tensors:
        broadcast_(tensor, root_rank, name=name)


__all__ = ["DistributedOptimizer", "DistributedTrainer", "broadcast_parameters"]
