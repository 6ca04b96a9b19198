"""Large collective outputs come from warm, reused memory (the output cache); reused blocks never leak stale
values; inputs nothing else holds are reduced in place; collectives in one tf.function run in any order."""
import resource
import threading

import numpy as np
import tensorflow as tf

import tfring as hvd
from rank_helpers import init

R, N = init()


def rank_values(r, n, it):
    """Integer-valued float32 data, different per rank and iteration (sums are exact in any order)."""
    return ((np.arange(n) * 7 + r * 13 + it * 5) % 251).astype(np.float32)


def test_reused_outputs_hold_exact_values():
    # Sizes above the cache's 256 KiB floor, including one 1/16 smaller than another (it reuses the larger
    # block), and every iteration's values differ: a block handed out again must be fully overwritten.
    for it in range(4):
        for n in (1 << 20, (1 << 20) - (1 << 16), 200_000):
            out = hvd.allreduce(tf.constant(rank_values(R, n, it)), op=hvd.Average, name="reuse_avg")
            total = sum(rank_values(r, n, it) for r in range(N))
            # x / N in float32, as numpy divides: the power-of-two path (np=2) multiplies by 1/2, which is exact.
            np.testing.assert_array_equal(out.numpy(), total / np.float32(N))
            gathered = hvd.allgather(tf.constant(rank_values(R, n // 4 + R, it)), name="reuse_gather")
            expected = np.concatenate([rank_values(r, n // 4 + r, it) for r in range(N)])
            np.testing.assert_array_equal(gathered.numpy(), expected)
            b = hvd.broadcast(tf.constant(rank_values(R, n, it)), root_rank=N - 1, name="reuse_bcast")
            np.testing.assert_array_equal(b.numpy(), rank_values(N - 1, n, it))


def test_repeated_large_allreduce_does_not_fault_in_fresh_pages():
    # Without the cache every 16 MiB output is newly mapped memory: ~3000-4096 page faults per call here.
    x = tf.constant(np.ones(4 << 20, np.float32))
    for _ in range(3):
        hvd.allreduce(x, op=hvd.Sum, name="faults")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        out = hvd.allreduce(x, op=hvd.Sum, name="faults")
        del out
    per_call = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10
    assert per_call < 256, "%.0f minor page faults per 16 MiB allreduce (4096 pages)" % per_call


def test_forwarded_inputs_are_reduced_in_place_with_exact_values():
    # x * 2 and the gradients are read by the collective only, so TF forwards them: in-place reduction.
    v = tf.Variable(rank_values(R, 1 << 18, 0))

    @tf.function
    def f(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * x)
        return hvd.allreduce(x * 2.0, op=hvd.Sum), hvd.DistributedGradientTape(tape).gradient(loss, v)
    for it in range(3):
        x = tf.constant(rank_values(R, 1 << 18, it + 1))
        doubled, grad = f(x)
        total = sum(rank_values(r, 1 << 18, it + 1) for r in range(N))
        np.testing.assert_array_equal(doubled.numpy(), 2 * total)
        np.testing.assert_array_equal(grad.numpy(), total / np.float32(N))


def test_collectives_in_one_tf_function_run_in_any_order():
    # Each rank's program lists the two collectives in a different order. Chained in program order (what
    # tf.function does to stateful ops by default) rank 0 would wait for "first" and rank 1 for "second":
    # a deadlock. tfring negotiates by name, so they must complete in any order.
    a, b = tf.constant([float(R)]), tf.constant([10.0 * R])

    @tf.function
    def f(a, b):
        if R % 2 == 0:
            x = hvd.allreduce(a, op=hvd.Sum, name="first")
            y = hvd.allreduce(b, op=hvd.Sum, name="second")
        else:
            y = hvd.allreduce(b, op=hvd.Sum, name="second")
            x = hvd.allreduce(a, op=hvd.Sum, name="first")
        return x, y
    result = []
    t = threading.Thread(target=lambda: result.append(f(a, b)), daemon=True)
    t.start()
    t.join(120)
    assert result, "collectives listed in a different order per rank did not complete within 120 s"
    x, y = result[0]
    assert x.numpy()[0] == sum(range(N)) and y.numpy()[0] == 10.0 * sum(range(N))
