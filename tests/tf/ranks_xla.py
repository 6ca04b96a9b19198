"""tfring's TensorFlow collectives inside compiled code (tf.function(jit_compile=True), Keras jit_compile=True):
the XLA lowering runs them through the same core (custom calls to the FFI handlers); values checked on every
rank, errors raised on every rank."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
import tfring.keras as hvd_keras
from rank_helpers import init

R, N = init()
DTYPES = [tf.int8, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32, tf.float64]
REDUCERS = {hvd.Sum: np.sum, hvd.Min: np.min, hvd.Max: np.max, hvd.Product: np.prod}


def value(r, shape):
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) % 3 + r + 1


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product])
def test_allreduce_in_compiled_code(dtype, op):
    for shape in [(), (3,), (2, 3, 4)]:
        x = tf.constant(value(R, shape), dtype)
        out = tf.function(lambda t: hvd.allreduce(t, op=op, name="xla_ar"), jit_compile=True)(x)
        stack = np.stack([value(r, shape) for r in range(N)])
        expected = stack.sum(0) / N if op == hvd.Average else REDUCERS[op](stack, axis=0)
        if op == hvd.Average and not dtype.is_floating:
            expected = np.trunc(expected)
        assert out.shape == shape and out.dtype == dtype
        np.testing.assert_allclose(out.numpy().astype(np.float64), expected, rtol=1e-2)


def test_grouped_scaled_broadcast_and_allgather_in_one_program():
    @tf.function(jit_compile=True)
    def step(a, b):
        s = hvd.grouped_allreduce([a, b], op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
        return s, hvd.broadcast(a, N - 1, name="xla_bc"), hvd.allgather(b, name="xla_ag")
    (s0, s1), bc, ag = step(tf.fill([3], float(R + 1)), tf.fill([2, 2], float(R)))
    total = sum(range(1, N + 1))
    np.testing.assert_allclose(s0, np.full(3, total * 0.5))
    np.testing.assert_allclose(s1, np.full((2, 2), sum(range(N)) * 0.5))
    np.testing.assert_allclose(bc, np.full(3, float(N)))
    np.testing.assert_allclose(ag, np.repeat(np.arange(N, dtype=np.float32), 2)[:, None] * np.ones(2))


def test_alltoall_and_reducescatter_in_compiled_code():
    @tf.function(jit_compile=True)
    def step(x, y):
        return hvd.alltoall(x, name="xla_a2a"), hvd.reducescatter(y, op=hvd.Sum, name="xla_rs")
    rows = 2 * N + 1  # reducescatter: rank 0 gets one row more
    out, rs = step(tf.range(2 * N) + 100 * R, tf.reshape(tf.range(rows * 2, dtype=tf.float32), [rows, 2]))
    np.testing.assert_array_equal(out, np.concatenate([np.arange(2 * R, 2 * R + 2) + 100 * r for r in range(N)]))
    counts = [rows // N + (1 if i < rows % N else 0) for i in range(N)]
    full = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * N
    np.testing.assert_allclose(rs, full[sum(counts[:R]):sum(counts[:R + 1])])
    splits = tf.constant([1] * N, tf.int32)  # a compile-time constant
    out, received = tf.function(lambda t: hvd.alltoall(t, splits=splits, name="xla_a2a_splits"),
                                jit_compile=True)(tf.fill([N, 3], R))
    np.testing.assert_array_equal(out, np.repeat(np.arange(N), 3).reshape(N, 3))
    np.testing.assert_array_equal(received, [1] * N)


def test_many_collectives_in_one_program_do_not_deadlock():
    # XLA:CPU runs independent custom calls concurrently, in an order that may differ by rank.
    xs = [tf.fill([256], float(i + R)) for i in range(12)]
    outs = tf.function(lambda *t: [hvd.allreduce(v, op=hvd.Sum, name="xla_many%d" % i) for i, v in enumerate(t)],
                       jit_compile=True)(*xs)
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out, np.full(256, sum(i + r for r in range(N))))


def test_gradient_tape_in_compiled_code():
    w = tf.Variable([1.0, 2.0])

    @tf.function(jit_compile=True)
    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * float(R + 1))
        return hvd.DistributedGradientTape(tape).gradient(loss, [w])[0]
    np.testing.assert_allclose(grads(), np.full(2, sum(range(1, N + 1)) / N))


def test_a_mismatch_inside_compiled_code_fails_on_every_rank():
    f = tf.function(lambda t: hvd.allreduce(t, name="xla_mismatch"), jit_compile=True)
    with pytest.raises(tf.errors.OpError, match="disagree on shape"):
        f(tf.ones([R + 2]))
    np.testing.assert_array_equal(tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="xla_after"),
                                              jit_compile=True)(tf.ones([2])), [N, N])


def test_allgather_with_other_row_counts_fails_instead_of_a_wrong_answer():
    f = tf.function(lambda t: hvd.allgather(t, name="xla_uneven"), jit_compile=True)
    if N == 1:
        pytest.skip("one rank")
    with pytest.raises(tf.errors.OpError, match="compiled program allocated"):
        f(tf.ones([2 if R == 0 else 1, 1]))


def test_keras_fit_with_jit_compile_equals_one_process_on_the_global_batch():
    def make():
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    rng = np.random.RandomState(3)
    steps, b = 4, 4
    x, y = rng.randn(steps * N * b, 5).astype("float32"), rng.randn(steps * N * b, 1).astype("float32")
    idx = np.concatenate([np.arange(s * N * b + R * b, s * N * b + (R + 1) * b) for s in range(steps)])
    model = make()
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse", jit_compile=True)
    model.fit(x[idx], y[idx], batch_size=b, epochs=2, shuffle=False, verbose=0,
              callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)])
    ref = make()
    ref.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=True)
    ref.fit(x, y, batch_size=N * b, epochs=2, shuffle=False, verbose=0)
    for a, e in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-6)
