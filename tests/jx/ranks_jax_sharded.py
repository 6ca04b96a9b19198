"""tfring.jax.DistributedOptimizer(sharded=True) (ZeRO stage 1 for optax) on real ranks, under jax.jit: Adam ends
with the unsharded DistributedOptimizer's parameters (uneven blocks: 75 float32 and 5 bfloat16 weights, which
neither 2 nor 3 divides), identical on every rank, while each rank's Adam state holds its blocks only; clipping by
the global norm across the blocks equals the unsharded clip; backward passes (stage 1 and 2) match optax.MultiSteps
unsharded; full_state() is the unsharded state, and a state
sharded over a process set of 2 ranks loads at the world size and unsharded; bad combinations fail on every
rank."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import tfring.jax as hvd
from tfring.jax._sharded import Accumulation, Shards

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()


def make_params():
    rng = np.random.default_rng(0)
    return {"kernel": jnp.asarray(rng.normal(size=(15, 5)), jnp.float32),
            "bias": jnp.asarray(rng.normal(size=(5,)), jnp.bfloat16)}  # a second dtype


def batch(step, rank):
    rng = np.random.default_rng(100 * step + rank)
    return jnp.asarray(rng.normal(size=(8, 15)), jnp.float32), jnp.asarray(rng.normal(size=(8, 5)), jnp.float32)


def loss(params, x, y):
    return jnp.mean((x @ params["kernel"] + params["bias"].astype(jnp.float32) - y) ** 2)


def train(tx, steps=6, params=None, state=None, start=0, members=None):
    params = make_params() if params is None else params
    state = tx.init(params) if state is None else state

    @jax.jit
    def step(params, state, x, y):
        updates, state = tx.update(jax.grad(loss)(params, x, y), state, params)
        return optax.apply_updates(params, updates), state

    for s in range(start, start + steps):
        params, state = step(params, state, *batch(s, R if members is None else members.index(R)))
    return params, state


def assert_close_everywhere(got, want):
    for name, tol in (("kernel", 2e-5), ("bias", 2e-2)):  # (bfloat16: the reductions may add in another order)
        g = np.asarray(got[name])
        assert np.isfinite(np.asarray(g, np.float32)).all(), (name, g)
        np.testing.assert_allclose(g, np.asarray(want[name]), rtol=tol, atol=tol / 10, err_msg="rank %d %s" % (R, name))
        assert all(np.array_equal(g, other) for other in hvd.allgather_object(g)), name


@pytest.mark.parametrize("clip", [None, 0.05])
def test_sharded_adam_ends_with_the_unsharded_parameters_keeping_only_its_shard(clip):
    sharded, _ = train(hvd.DistributedOptimizer(optax.adam(0.01), sharded=True, clip_by_global_norm=clip))
    plain, _ = train(hvd.DistributedOptimizer(optax.adam(0.01), clip_by_global_norm=clip))
    assert_close_everywhere(sharded, plain)
    state = hvd.DistributedOptimizer(optax.adam(0.01), sharded=True).init(make_params())
    adam = state[-1][0]  # (the unsharded DistributedOptimizer's chain: (reduction, (adam, ...)))
    blocks = [5 // N + (R < 5 % N), 75 // N + (R < 75 % N)]  # bias, kernel (key order); the first ranks one more
    assert isinstance(adam.mu, Shards) and [m.shape for m in adam.mu] == [(blocks[0],), (blocks[1],)], adam.mu
    assert [str(m.dtype) for m in adam.nu] == ["bfloat16", "float32"]


def test_full_state_is_the_unsharded_state_and_loads_at_another_size_and_unsharded():
    tx = hvd.DistributedOptimizer(optax.adam(0.01), sharded=True)
    params, state = train(tx, steps=4)
    full = tx.full_state(state, params)
    plain_tx = hvd.DistributedOptimizer(optax.adam(0.01))
    plain_params, plain_state = train(plain_tx, steps=4)
    for got, want in zip(jax.tree_util.tree_leaves(full), jax.tree_util.tree_leaves(plain_state)):
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=2e-2, atol=1e-5)
    assert jax.tree_util.tree_structure(full) == jax.tree_util.tree_structure(plain_state)
    # Sharded over ranks {0, 1} only, saved (full), then loaded sharded over every rank and unsharded: two more
    # steps each match the unsharded run that never stopped.
    pair = hvd.add_process_set([0, 1]) if N > 2 else hvd.global_process_set
    try:
        if R in (0, 1):
            pair_tx = hvd.DistributedOptimizer(optax.adam(0.01), sharded=True, process_set=pair)
            p2, s2 = train(pair_tx, steps=4, members=[0, 1])
            saved = pair_tx.full_state(s2, p2)
        else:
            saved = None
        p2, saved = hvd.broadcast_object((p2, saved) if R == 0 else None, root_rank=0)
    finally:
        if N > 2:
            hvd.remove_process_set(pair)
    want, _ = train(plain_tx, steps=2, params=p2, state=saved, start=4, members=None)
    got, _ = train(tx, steps=2, params=p2, state=tx.shard_state(saved, p2), start=4)
    assert_close_everywhere(got, want)


@pytest.mark.parametrize("stage", [1, 2])
def test_backward_passes_match_the_unsharded_accumulation_and_stage_2_keeps_only_its_blocks(stage):
    # 6 passes, 3 per update: both stages end where the unsharded DistributedOptimizer (optax.MultiSteps) ends.
    # Stage 1 keeps the whole local gradient between passes; stage 2 reduce-scatters each pass and keeps the sum of
    # its blocks only.
    tx = hvd.DistributedOptimizer(optax.adam(0.01), sharded=stage, backward_passes_per_step=3,
                                  clip_by_global_norm=0.5)
    params, state = train(tx)
    plain_tx = hvd.DistributedOptimizer(optax.adam(0.01), backward_passes_per_step=3, clip_by_global_norm=0.5)
    plain, plain_state = train(plain_tx)
    assert_close_everywhere(params, plain)
    assert not np.array_equal(np.asarray(params["kernel"]), np.asarray(make_params()["kernel"]))
    blocks = [5 // N + (R < 5 % N), 75 // N + (R < 75 % N)]
    if stage == 2:
        acc = state[-1]
        assert isinstance(acc, Accumulation) and [g.shape for g in acc.grads] == [(b,) for b in blocks]
        half, _ = train(tx, steps=2)  # mid-accumulation: held, nothing applied yet
        assert_close_everywhere(half, make_params())
    else:
        full = tx.full_state(state, params)  # the unsharded MultiSteps state
        assert jax.tree_util.tree_structure(full) == jax.tree_util.tree_structure(plain_state)
        for got, want in zip(jax.tree_util.tree_leaves(full), jax.tree_util.tree_leaves(plain_state)):
            atol = 1e-4 if str(want.dtype) == "bfloat16" else 1e-5  # (bfloat16: a few ulps apart, as the bias is)
            np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=2e-2,
                                       atol=atol)


def test_what_sharding_cannot_do_is_refused_by_name():
    adam = optax.adam(0.01)
    with pytest.raises(ValueError, match=r"sharded=3 must be False, True \(or 1: ZeRO stage 1\) or 2"):
        hvd.DistributedOptimizer(adam, sharded=3)
    with pytest.raises(ValueError, match=r"does not combine with sharded=True \(PowerSGD"):
        hvd.DistributedOptimizer(adam, sharded=True, compression=hvd.Compression.powersgd())
    with pytest.raises(ValueError, match=r"clip_by_global_norm=-1 must be a number > 0"):
        hvd.DistributedOptimizer(adam, sharded=True, clip_by_global_norm=-1)
    tx = hvd.DistributedOptimizer(adam, sharded=True)
    params = make_params()
    with pytest.raises(ValueError, match=r"sharded=True needs the parameters"):
        tx.update(params, tx.init(params))
