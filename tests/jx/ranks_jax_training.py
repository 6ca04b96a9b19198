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


def global_batch(s):
    xs, ys = zip(*[batch(s, r) for r in range(N)])
    return np.concatenate(xs), np.concatenate(ys)


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
    for fn, call in [("DistributedOptimizer", lambda: hvd.DistributedOptimizer(optax.sgd(0.1), compression="fp16")),
                     ("allreduce", lambda: hvd.allreduce(jnp.ones(2), compression=None)),
                     ("grouped_allreduce", lambda: jax.jit(lambda t: hvd.grouped_allreduce(
                         [t], compression=jnp.float16))(jnp.ones(2)))]:
        with pytest.raises(ValueError, match=r"tfring\.jax\.%s: compression must be .*, got " % fn):
            call()


# ---- compression ---------------------------------------------------------------------------------------------------
WIRE = {"fp16": (hvd.Compression.fp16, jnp.float16, 1e-4), "bf16": (hvd.Compression.bf16, jnp.bfloat16, 1e-3)}


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("kind", sorted(WIRE))
def test_compressed_allreduce_equals_the_16_bit_rounded_sum_on_every_rank(mode, kind):
    compression, wire, tiny = WIRE[kind]

    def value(r):  # `tiny` is below half the wire type's spacing at these magnitudes: the cast drops it
        return np.asarray([r + 1.25, -(r + 0.75), 2.0 * r + 3], np.float32) + np.float32(tiny)
    rounded = [np.asarray(jnp.asarray(value(r)).astype(wire), np.float32) for r in range(N)]
    assert not np.array_equal(rounded[0], value(0))
    # Sums of the rounded values are exact in either 16-bit type, so the reduction order does not matter.
    expected = np.sum(rounded, axis=0)

    def f(x, i):  # the int32 array is beyond float16's range: only floating arrays may be cast
        return hvd.grouped_allreduce([x, i], op=hvd.Sum, compression=compression, name="compressed_" + kind)
    args = (jnp.asarray(value(R)), jnp.asarray([100003 + R], jnp.int32))
    out, ints = jax.jit(f)(*args) if mode == "jit" else f(*args)
    assert out.dtype == jnp.float32 and ints.dtype == jnp.int32
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(ints, [sum(100003 + r for r in range(N))])
    avg = (jax.jit if mode == "jit" else lambda g: g)(
        lambda t: hvd.allreduce(t, compression=compression, name="compressed_avg_" + kind))(args[0])
    assert avg.dtype == jnp.float32
    np.testing.assert_allclose(avg, expected / N, rtol=float(jnp.finfo(wire).eps))


@pytest.mark.parametrize("kind", sorted(WIRE))
def test_optimizer_with_compression_trains_alike_on_every_rank(kind):
    compression, _, _ = WIRE[kind]
    params = hvd.broadcast_parameters(init_params(R), root_rank=0)
    got = train(hvd.DistributedOptimizer(optax.sgd(0.1, momentum=0.9), compression=compression), params, STEPS,
                lambda s: batch(s, R))
    exact = train(optax.sgd(0.1, momentum=0.9), init_params(0), STEPS, global_batch)
    x, y = (np.concatenate(a) for a in zip(*[global_batch(s) for s in range(STEPS)]))
    assert loss(got, x, y) < loss(init_params(0), x, y)  # it trains (on the data it saw)
    for k in exact:  # like the uncompressed run, within the 16-bit rounding of the gradients...
        np.testing.assert_allclose(got[k], exact[k], rtol=0.02, atol=5e-3, err_msg="rank %d, %s" % (R, k))
    # ...but further from it than float32's reduction order takes the uncompressed run: the gradients did travel
    # rounded
    plain = train(hvd.DistributedOptimizer(optax.sgd(0.1, momentum=0.9)), params, STEPS, lambda s: batch(s, R))
    off = max(float(np.max(np.abs(got[k] - exact[k]))) for k in exact)
    noise = max(float(np.max(np.abs(plain[k] - exact[k]))) for k in exact)
    assert off > 10 * noise, (off, noise)
    mine = {k: np.asarray(v) for k, v in got.items()}
    for r, theirs in enumerate(hvd.allgather_object(mine)):  # every rank holds the same weights
        for k in mine:
            np.testing.assert_array_equal(theirs[k], mine[k], err_msg="rank %d vs %d, %s" % (R, r, k))
