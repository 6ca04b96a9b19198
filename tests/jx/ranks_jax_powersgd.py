"""tfring.jax.DistributedOptimizer(compression=Compression.powersgd(...)) on real ranks: an optax SGD step under
jax.jit ends with the weights of the float64 numpy simulation of every rank's PowerSGD (tests/powersgd_reference.py),
identical on every rank; the optax state holds Q and the error of the compressed kernel only; bad settings fail on
every rank."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import tfring.jax as hvd
from powersgd_reference import LR, STEPS, batch, initial_weights, simulated

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()


def loss(params, x, y):
    return jnp.mean((x @ params["kernel"] + params["bias"] - y) ** 2)


@pytest.mark.parametrize("rank,warmup", [(1, 0), (2, 2)])
def test_jitted_optax_steps_match_a_simulation_of_every_rank(rank, warmup):
    config = hvd.Compression.powersgd(rank=rank, warmup_steps=warmup)
    kernel, bias = initial_weights()
    params = {"kernel": jnp.asarray(kernel), "bias": jnp.asarray(bias)}
    tx = hvd.DistributedOptimizer(optax.sgd(LR), compression=config)
    state = tx.init(params)

    @jax.jit
    def step(params, state, x, y):
        updates, state = tx.update(jax.grad(loss)(params, x, y), state, params)
        return optax.apply_updates(params, updates), state

    for s in range(STEPS):
        params, state = step(params, state, *batch(s, R))
    want = simulated(config, N, kernel_index=1)  # the leaves in key order: bias, kernel
    for name, w in zip(("kernel", "bias"), want):
        got = np.asarray(params[name])
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5, err_msg="rank %d, %s" % (R, name))
        assert all(np.array_equal(got, other) for other in hvd.allgather_object(got)), name
    psgd = state[0]
    assert int(psgd.count) == STEPS
    assert [q.shape for q in psgd.qs] == [(96, rank)] and [e.shape for e in psgd.errors] == [(64, 96)]


def test_bad_settings_fail_on_every_rank():
    with pytest.raises(ValueError, match=r"min_size=0 must be an int >= 1"):
        hvd.Compression.powersgd(min_size=0)
    with pytest.raises(ValueError, match=r"a single collective takes Compression.none"):
        hvd.allreduce(jnp.ones(3), name="psgd.bad", compression=hvd.Compression.powersgd())
