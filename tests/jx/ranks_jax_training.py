"""tfring.jax.DistributedOptimizer (optax) on real ranks: training in a jitted step on each rank's batch equals
one process training on the concatenation of every rank's batches."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import tfring.jax as hvd

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()
B, STEPS = 4, 4


def init_params(seed):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return {"w1": jax.random.normal(k1, (5, 8)) * 0.5, "b1": jnp.zeros(8), "w2": jax.random.normal(k2, (8, 1)) * 0.5}


def loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def batch(step, r):
    rng = np.random.RandomState(100 * step + r)
    return rng.randn(B, 5).astype(np.float32), rng.randn(B, 1).astype(np.float32)


def train(tx, params, steps, batches):
    state = tx.init(params)

    @jax.jit
    def step(params, state, x, y):
        grads = jax.grad(loss)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    for s in range(steps):
        params, state = step(params, state, *batches(s))
    return params


@pytest.mark.parametrize("make", [lambda: optax.sgd(0.1, momentum=0.9), lambda: optax.adam(0.01)],
                         ids=["sgd_momentum", "adam"])
def test_equals_one_process_on_the_global_batch(make):
    params = hvd.broadcast_parameters(init_params(R), root_rank=0)  # every rank starts from rank 0's
    got = train(hvd.DistributedOptimizer(make()), params, STEPS, lambda s: batch(s, R))

    def global_batch(s):
        xs, ys = zip(*[batch(s, r) for r in range(N)])
        return np.concatenate(xs), np.concatenate(ys)
    expected = train(make(), init_params(0), STEPS, global_batch)
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=2e-5, atol=2e-6, err_msg="rank %d, %s" % (R, k))


def test_backward_passes_per_step_accumulates_before_one_update():
    params = hvd.broadcast_parameters(init_params(R), root_rank=0)
    got = train(hvd.DistributedOptimizer(optax.sgd(0.1), backward_passes_per_step=2), params, 4,
                lambda s: batch(s, R))

    def two_steps(s):  # each update: the mean of two local steps' gradients, averaged over the ranks
        xs, ys = zip(*[batch(k, r) for k in (2 * s, 2 * s + 1) for r in range(N)])
        return np.concatenate(xs), np.concatenate(ys)
    expected = train(optax.sgd(0.1), init_params(0), 2, two_steps)
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=2e-5, atol=2e-6, err_msg="rank %d, %s" % (R, k))


def test_bad_arguments():
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        hvd.DistributedOptimizer(optax.sgd(0.1), backward_passes_per_step=0)
    with pytest.raises(ValueError, match="op must be Average or Sum"):
        hvd.DistributedOptimizer(optax.sgd(0.1), op=hvd.Max)
    with pytest.raises(ValueError, match="optax.GradientTransformation"):
        hvd.DistributedOptimizer("sgd")
