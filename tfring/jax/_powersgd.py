"""PowerSGD (tfring/common/powersgd.py) as an optax transformation: Q and the error live in the optax state (so the
transformation stays pure and runs inside jax.jit), the warm-up is a lax.cond, the linear algebra jax.numpy's."""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from tfring.common import powersgd
from tfring.common.gradient_groups import communicates
from tfring.jax._reduce import grouped_allreduce


class JaxLinearAlgebra(powersgd.LinearAlgebra):
    """jax.numpy's matrix products and QR."""

    matmul = staticmethod(jnp.matmul)
    matmul_tn = staticmethod(lambda a, b: a.T @ b)
    matmul_nt = staticmethod(lambda a, b: a @ b.T)
    orthonormal = staticmethod(lambda p: jnp.linalg.qr(p, mode="reduced")[0])


class PowerSGDState(NamedTuple):
    """The transformation's state: the steps taken, and per compressed leaf (in leaf order) its Q and error."""
    count: jnp.ndarray
    qs: tuple
    errors: tuple


def transformation(config, reduce_kwargs):
    """An optax transformation that reduces the updates with PowerSGD.

    Args:
        config: the `PowerSGD` settings.
        reduce_kwargs: the grouped allreduce's op, scale factors and process_set.

    Returns:
        optax.GradientTransformation
    """
    def shapes(leaves):
        return [(i, config.matrix_shape(leaf.shape)) for i, leaf in enumerate(leaves)
                if config.matrix_shape(leaf.shape) is not None]

    def init(params):
        leaves = jax.tree_util.tree_leaves(params)
        compressed = shapes(leaves)
        return PowerSGDState(jnp.zeros((), jnp.int32),
                             tuple(jnp.asarray(config.initial_q(nm[1], i), leaves[i].dtype) for i, nm in compressed),
                             tuple(jnp.zeros(nm, leaves[i].dtype) for i, nm in compressed))

    def update(updates, state, params=None):
        del params
        if not communicates(reduce_kwargs["process_set"]):
            return updates, state  # a set of one rank, or this rank outside it: unchanged, as without PowerSGD
        leaves, tree = jax.tree_util.tree_flatten(updates)
        compressed = shapes(leaves)
        index = [i for i, _ in compressed]
        plain = [i for i in range(len(leaves)) if i not in index]
        rounds = iter(("powersgd.P", "powersgd.Q"))

        def allreduce(tensors):
            return list(grouped_allreduce(tensors, name=next(rounds), **reduce_kwargs)) if tensors else []

        def compress(_):
            out, qs, errors = powersgd.compress_step(leaves, dict(compressed), index, plain, state.qs, state.errors,
                                                     allreduce, JaxLinearAlgebra, jnp.reshape)
            return out, tuple(qs), tuple(errors)

        def warm_up(_):
            reduced = grouped_allreduce([leaves[i] for i in index + plain], name="powersgd.warmup", **reduce_kwargs)
            return list(reduced), state.qs, state.errors

        if config.warmup_steps:
            out, qs, errors = jax.lax.cond(state.count < config.warmup_steps, warm_up, compress, None)
        else:
            out, qs, errors = compress(None)
        result = powersgd.placed(leaves, index + plain, out)
        return jax.tree_util.tree_unflatten(tree, result), PowerSGDState(state.count + 1, qs, errors)

    return optax.GradientTransformation(init, update)
