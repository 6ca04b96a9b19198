"""ZeRO stage 1 for tfring.jax.DistributedOptimizer (`sharded=True`), as an optax transformation: the parameters of
each dtype lie end to end in one flat vector, padded to a multiple of the set's size n; rank r owns elements
[r*s, (r+1)*s) (s = ceil(length / n)). Each update reduce-scatters the flat gradient (each rank receives the average
of its shard), runs the wrapped transformation on that shard with the rank's shard of the parameters — so its state
(Adam's moments, ...) is 1/n of the unsharded one — and all-gathers the updated shards into the whole update, the
same on every rank. Pure, so it runs inside jax.jit.

The wrapped transformation sees a `Shards` tuple (one flat shard per dtype) where it would see the parameters: it
must be element-wise (sgd, momentum, adam, adamw, rmsprop, adagrad, lion, ...). One that looks at a whole parameter
or at every parameter (clip_by_global_norm, LAMB's trust ratio, masks by name) would see a flat shard instead, which
no check can see inside an optax chain: `clip_by_global_norm=` here clips by the norm taken across the shards.
`full_state` / `shard_state` convert to and from the unsharded layout, which an unsharded optimizer (or a sharded
one at any size) loads."""
import math

import jax
import jax.numpy as jnp
import optax

from tfring.common.reduce_ops import Sum
from tfring.jax._gather import grouped_allgather
from tfring.jax._reduce import grouped_allreduce
from tfring.jax._reducescatter import grouped_reducescatter


class Shards(tuple):
    """This rank's flat shard of each dtype's parameters (a pytree node: optax maps over its arrays)."""


jax.tree_util.register_pytree_node(Shards, lambda s: (tuple(s), None), lambda _, children: Shards(children))


def _is_shards(x):
    return isinstance(x, Shards)


class Layout:
    """Where each parameter lies in its dtype's flat vector, and this rank's shard of each vector.

    Args:
        params: the parameters' pytree (arrays, or anything with shape and dtype).
        rank, size: this rank's position in the process set and the set's size.
    """

    def __init__(self, params, rank, size):
        leaves, self.tree = jax.tree_util.tree_flatten(params)
        self.rank, self.size = rank, size
        self.shapes = [tuple(leaf.shape) for leaf in leaves]
        self.groups = []  # [(dtype, [leaf index, ...], length, shard)]
        for dtype in sorted({jnp.dtype(leaf.dtype).name for leaf in leaves}):
            members = [i for i, leaf in enumerate(leaves) if jnp.dtype(leaf.dtype).name == dtype]
            length = sum(math.prod(self.shapes[i]) for i in members)
            self.groups.append((dtype, members, length, max(1, -(-length // size))))

    def sizes(self):
        """Every rank's shard length per group (allgather's sizes=)."""
        return [(shard,) * self.size for _, _, _, shard in self.groups]

    def flats(self, tree):
        """The tree's leaves laid end to end per dtype, each padded to size * shard."""
        leaves = jax.tree_util.tree_leaves(tree)
        out = []
        for dtype, members, length, shard in self.groups:
            parts = [jnp.ravel(leaves[i]).astype(dtype) for i in members]
            parts.append(jnp.zeros((shard * self.size - length,), dtype))
            out.append(jnp.concatenate(parts))
        return out

    def mine(self, tree):
        """This rank's shard of each of the tree's flat vectors."""
        return Shards(flat[self.rank * shard:(self.rank + 1) * shard]
                      for flat, (_, _, _, shard) in zip(self.flats(tree), self.groups))

    def unflatten(self, fulls):
        """The parameters' pytree cut back out of whole flat vectors (one per group; padding dropped)."""
        leaves = [None] * len(self.shapes)
        for full, (_, members, _, _) in zip(fulls, self.groups):
            at = 0
            for i in members:
                count = math.prod(self.shapes[i])
                leaves[i] = jnp.reshape(full[at:at + count], self.shapes[i])
                at += count
        return jax.tree_util.tree_unflatten(self.tree, leaves)


def transformation(inner, op, prescale, postscale, process_set, compression, clip_norm, name):
    """The sharded optax transformation around `inner` (see the module's docstring).

    Args:
        inner: the wrapped (element-wise) optax.GradientTransformation.
        op: Average or Sum, with the prescale and postscale factors.
        process_set: the set to shard over (a rank outside it gets a ValueError).
        compression: the gradients' wire type (tfring.jax.Compression.none, .fp16, .bf16).
        clip_norm: clip the gradient by this global norm (across the shards), or None.
        name: the collectives' name prefix.

    Returns:
        ShardedTransformation
    """
    prefix = name or "sharded"
    # The state is the unsharded DistributedOptimizer's (optax.chain(reduction[, clip], inner)) with the inner
    # state sharded: full_state() then gives exactly what an unsharded one holds.
    head = (optax.EmptyState(),) * (1 if clip_norm is None else 2)

    def layout(params):
        rank, size = process_set.rank(), process_set.size()
        if rank is None or rank < 0:
            raise ValueError("tfring.jax.DistributedOptimizer: sharded on a rank outside process_set %r"
                             % (process_set,))
        return Layout(params, rank, size)

    def init(params):
        return head + (inner.init(layout(params).mine(params)),)

    def update(grads, state, params=None):
        if params is None:
            raise ValueError("tfring.jax.DistributedOptimizer: sharded=True needs the parameters: call "
                             "update(grads, opt_state, params)")
        lay = layout(params)
        wire = [compression.compress(flat) for flat in lay.flats(grads)]
        shards = grouped_reducescatter([w for w, _ in wire], name=prefix + ".grads", op=op, process_set=process_set,
                                       prescale_factor=prescale, postscale_factor=postscale)
        shards = Shards(compression.decompress(s, ctx).astype(dtype)
                        for s, (_, ctx), (dtype, _, _, _) in zip(shards, wire, lay.groups))
        if clip_norm is not None:
            squares = sum(jnp.sum(jnp.square(s.astype(jnp.float32))) for s in shards)
            norm = jnp.sqrt(grouped_allreduce([squares], name=prefix + ".norm", op=Sum,
                                              process_set=process_set)[0])
            scale = jnp.minimum(1.0, clip_norm / jnp.maximum(norm, 1e-12))
            shards = Shards(s * scale.astype(s.dtype) for s in shards)
        updates, inner_state = inner.update(shards, state[-1], lay.mine(params))
        full = grouped_allgather(list(updates), name=prefix + ".updates", process_set=process_set,
                                 sizes=lay.sizes())
        return lay.unflatten(full), head + (inner_state,)

    def full_state(state, params):
        lay = layout(params)

        def unshard(shards):
            return lay.unflatten(grouped_allgather(list(shards), process_set=process_set, sizes=lay.sizes()))
        return jax.tree_util.tree_map(lambda x: unshard(x) if _is_shards(x) else x, state, is_leaf=_is_shards)

    def shard_state(state, params):
        lay = layout(params)

        def is_params(x):
            if jax.tree_util.tree_structure(x) != lay.tree:
                return False
            return [tuple(jnp.shape(leaf)) for leaf in jax.tree_util.tree_leaves(x)] == lay.shapes
        return jax.tree_util.tree_map(lambda x: lay.mine(x) if is_params(x) else x, state, is_leaf=is_params)

    return ShardedTransformation(init, update, full_state, shard_state)


class ShardedTransformation(optax.GradientTransformation):
    """An optax.GradientTransformation (init, update) that also converts its state to and from the unsharded layout.

    `full_state(state, params)`: the state as an unsharded DistributedOptimizer of the same steps holds it (each
    shard all-gathered: every rank of the set calls it); what a checkpoint keeps, loadable at any size.
    `shard_state(state, params)`: this rank's shard of an unsharded state (no collective).
    """

    def __new__(cls, init, update, full_state, shard_state):
        self = super().__new__(cls, init, update)
        self.__dict__.update(full_state=full_state, shard_state=shard_state)
        return self
