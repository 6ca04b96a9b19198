"""`DistributedOptimizer` for optax: an optax GradientTransformation that averages the gradients over the ranks
(one grouped allreduce of the whole gradient pytree, fused by the core) before the wrapped transformation.

    tx = hvd.DistributedOptimizer(optax.adam(1e-3))
    updates, opt_state = tx.update(grads, opt_state, params)     # inside jax.jit too
"""
import jax
import optax

from tfring.common import powersgd
from tfring.common.process_sets import global_process_set
from tfring.common.reduce_ops import Adasum, Average, Sum, resolve_op
from tfring.jax import _powersgd, _sharded
from tfring.jax._reduce import grouped_allreduce
from tfring.jax.compression import Compression, checked


def allreduce_gradients(op=Average, gradient_predivide_factor=1.0, process_set=global_process_set, name=None,
                        compression=Compression.none):
    """An optax transformation that reduces the updates (gradients) over the ranks.

    Args:
        op: Average (default) or Sum.
        gradient_predivide_factor: with Average, gradients are divided by this before the sum and by
            size/this after it (Horovod's option).
        process_set: the `tfring.ProcessSet` to reduce over (default: all ranks).
        name: the collective's name (default: numbered in trace order).
        compression: `Compression.none` (default), `.fp16` or `.bf16`: floating gradients travel as that 16-bit
            type, and come back in their own dtype; or `Compression.powersgd(rank, warmup_steps, min_size)`: a
            rank-r approximation with error feedback, its Q and error in the optax state (docs/compression.md).

    Returns:
        optax.GradientTransformation

    Raises:
        ValueError: an op other than Average/Sum, a bad gradient_predivide_factor or compression.
    """
    low_rank = powersgd.settings(compression)
    if low_rank is None:
        checked("DistributedOptimizer", compression)
    op = resolve_op("DistributedOptimizer", op, None)
    if op not in (Average, Sum):
        raise ValueError("tfring.jax.DistributedOptimizer: op must be Average or Sum, got %r%s"
                         % (op, " (Adasum is not implemented for JAX)" if op == Adasum else ""))
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if gradient_predivide_factor <= 0:
        raise ValueError("gradient_predivide_factor must be > 0, got %r" % (gradient_predivide_factor,))
    if low_rank is not None:
        return _powersgd.transformation(low_rank, dict(
            op=op, prescale_factor=1.0 / gradient_predivide_factor, process_set=process_set,
            postscale_factor=gradient_predivide_factor if op == Average else 1.0))

    def update(updates, state, params=None):
        del params
        leaves, tree = jax.tree_util.tree_flatten(updates)
        if not leaves:
            return updates, state
        pre = 1.0 / gradient_predivide_factor
        post = gradient_predivide_factor if op == Average else 1.0
        reduced = grouped_allreduce(leaves, op=op, prescale_factor=pre, postscale_factor=post, name=name,
                                    process_set=process_set, compression=compression)
        return jax.tree_util.tree_unflatten(tree, reduced), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def DistributedOptimizer(optimizer, op=Average, gradient_predivide_factor=1.0, backward_passes_per_step=1,
                         process_set=global_process_set, name=None, compression=Compression.none, sharded=False,
                         clip_by_global_norm=None):
    """Wraps an optax transformation so that it sees the gradients averaged over the ranks.

    Args:
        optimizer: an optax.GradientTransformation.
        op: Average (default) or Sum.
        gradient_predivide_factor: see `allreduce_gradients`.
        backward_passes_per_step: gradients of this many steps are accumulated locally (optax.MultiSteps)
            before one reduction and update.
        process_set: the `tfring.ProcessSet` to reduce over (default: all ranks).
        name: the collective's name.
        compression: `Compression.none` (default), `.fp16`, `.bf16` or `.powersgd(...)` for the gradients'
            transfer (see `allreduce_gradients`).
        sharded: False, or True (ZeRO stage 1): each rank of the set keeps and updates the wrapped
            transformation's state for its 1/n of the parameters (reduce-scatter the gradients, update the shard,
            all-gather the updates; `update` then needs the params). The wrapped transformation must be element-wise
            (docs/sharded-optimizer.md); the result's `full_state` / `shard_state` convert its state to and from
            the unsharded layout (checkpoints that load at any size, sharded or not). With
            backward_passes_per_step > 1, True keeps the whole local gradient between passes (optax.MultiSteps);
            2 (ZeRO stage 2) reduce-scatters every pass and keeps only this rank's blocks of the sum.
        clip_by_global_norm: clip the averaged gradient by this global norm before the wrapped transformation
            (as `optax.chain(optax.clip_by_global_norm(x), optimizer)`; sharded, the norm is taken across the
            shards, which a clip inside the wrapped chain would not do).

    Returns:
        optax.GradientTransformation (an optax.MultiSteps when backward_passes_per_step > 1; sharded, a
        `ShardedTransformation`).

    Raises:
        ValueError: a bad op, predivide factor, backward_passes_per_step, compression, clip_by_global_norm, or
            sharded with what it does not combine with.
    """
    if not isinstance(optimizer, optax.GradientTransformation):
        raise ValueError("tfring.jax.DistributedOptimizer: expected an optax.GradientTransformation, got %s"
                         % type(optimizer).__name__)
    if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, int) \
            or backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be an int > 0, got %r" % (backward_passes_per_step,))
    if clip_by_global_norm is not None and not (isinstance(clip_by_global_norm, (int, float)) and
                                                not isinstance(clip_by_global_norm, bool) and clip_by_global_norm > 0):
        raise ValueError("tfring.jax.DistributedOptimizer: clip_by_global_norm=%r must be a number > 0 (or None)"
                         % (clip_by_global_norm,))
    if sharded is not False and sharded is not None and sharded != 0:
        return _sharded_optimizer(optimizer, op, gradient_predivide_factor, backward_passes_per_step, process_set,
                                  name, compression, sharded, clip_by_global_norm)
    clip = [] if clip_by_global_norm is None else [optax.clip_by_global_norm(clip_by_global_norm)]
    tx = optax.chain(allreduce_gradients(op, gradient_predivide_factor, process_set, name, compression), *clip,
                     optimizer)
    return optax.MultiSteps(tx, backward_passes_per_step) if backward_passes_per_step > 1 else tx


def _sharded_optimizer(optimizer, op, gradient_predivide_factor, backward_passes_per_step, process_set, name,
                       compression, sharded, clip_norm):
    """DistributedOptimizer(sharded=...): the checks, then tfring/jax/_sharded.py's transformation."""
    who = "tfring.jax.DistributedOptimizer"
    if isinstance(sharded, float) or sharded not in (True, 1, 2):
        raise ValueError("%s: sharded=%r must be False, True (or 1: ZeRO stage 1) or 2 (stage 2: with "
                         "backward_passes_per_step > 1 only this rank's blocks of the gradients are accumulated)"
                         % (who, sharded))
    if powersgd.settings(compression) is not None:
        raise ValueError("%s: compression=%r does not combine with sharded=True (PowerSGD reduces whole matrices; "
                         "the sharded path reduce-scatters flat vectors)" % (who, compression))
    checked("DistributedOptimizer", compression)
    op = resolve_op("DistributedOptimizer", op, None)
    if op not in (Average, Sum):
        raise ValueError("%s: op must be Average or Sum, got %r" % (who, op))
    if gradient_predivide_factor <= 0 or (gradient_predivide_factor != 1.0 and op != Average):
        raise ValueError("%s: gradient_predivide_factor=%r must be > 0, and 1 unless op is Average"
                         % (who, gradient_predivide_factor))
    k = backward_passes_per_step
    tx = _sharded.transformation(optimizer, op, 1.0 / gradient_predivide_factor,
                                 gradient_predivide_factor if op == Average else 1.0, process_set, compression,
                                 clip_norm, name, passes=k if sharded == 2 else 1)
    if k == 1 or sharded == 2:
        return tx
    # Stage 1 over k passes: optax.MultiSteps keeps the whole local gradient and updates (sharded) on the k-th,
    # as the unsharded DistributedOptimizer does; its state converts like the unsharded one's.
    steps = optax.MultiSteps(tx, k)
    return _sharded.ShardedTransformation(
        steps.init, steps.update,
        lambda state, params: state._replace(inner_opt_state=tx.full_state(state.inner_opt_state, params)),
        lambda state, params: state._replace(inner_opt_state=tx.shard_state(state.inner_opt_state, params)))
