"""Promises of README/docs about values that no other test checked (issue #18 item 10): integer Average
truncating toward zero with negative sums, every collective's forward values inside tf.function, the Min
allreduce gradient, gradient_predivide_factor, op=Sum in training, LearningRateScheduleCallback, and the bounded
kernel cache of unnamed eager collectives. Every rank checks every value."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
import tfring.keras as hvdk
from rank_helpers import init

R, N = init()
S = N * (N + 1) // 2  # sum over ranks of (rank + 1): the upstream gradient weights used below


def int_values(r):
    """Per-rank integers in [-7, 3]: their sums over ranks are negative and not divisible by N somewhere."""
    vals = (np.arange(12) * 5 + r * 3) % 11 - 7
    vals[0] = -3 if r == 0 else 0  # the README example: -3 and 0 at np=2 average to -1, not floor's -2
    return vals


def truncated_average(total):
    return np.sign(total) * (np.abs(total) // N)  # C's integer division: toward zero


@pytest.mark.parametrize("dtype", [tf.int8, tf.int16, tf.int32, tf.int64], ids=lambda d: d.name)
def test_integer_average_truncates_toward_zero_with_negative_values(dtype):
    total = sum(int_values(r) for r in range(N))
    want = truncated_average(total)
    # The inputs discriminate: somewhere truncation and floor (what a float average rounded down gives) differ.
    assert (want != total // N).any()
    x = tf.constant(int_values(R), dtype)
    np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Average, name="int_avg").numpy(), want)

    @tf.function
    def graph(a):
        return hvd.allreduce(a, op=hvd.Average, name="int_avg_graph"), \
            hvd.grouped_allreduce([a, -a], op=hvd.Average, name="int_avg_grouped")
    single, (plus, minus) = graph(x)
    np.testing.assert_array_equal(single.numpy(), want)
    np.testing.assert_array_equal(plus.numpy(), want)
    np.testing.assert_array_equal(minus.numpy(), truncated_average(-total))
    # reducescatter's Average truncates alike; rank i keeps rows [i*k, (i+1)*k) of dim 0.
    rows = np.stack([int_values(R)] * N)  # (N, 12)
    scattered = hvd.reducescatter(tf.constant(rows, dtype), op=hvd.Average, name="int_avg_rs")
    np.testing.assert_array_equal(scattered.numpy(), want[None, :])


def test_every_collective_inside_tf_function_forward_values():
    x = tf.constant(np.arange(6, dtype=np.float32) + 10 * R)  # rank r: 10r .. 10r+5
    rows = tf.fill([R + 1, 2], float(R))  # rank r: r+1 rows of value r
    splits = [(R + d) % 3 for d in range(N)]
    sent = tf.constant(np.array([100 * R + d for d in range(N) for _ in range(splits[d])], np.float32))
    scatter_in = tf.constant(np.arange(2 * N + 1, dtype=np.float32) * (R + 1))

    @tf.function
    def everything(x, rows, sent, scatter_in):
        return {
            "avg": hvd.allreduce(x, op=hvd.Average, name="fw_avg"),
            "sum": hvd.allreduce(x, op=hvd.Sum, name="fw_sum"),
            "min": hvd.allreduce(x, op=hvd.Min, name="fw_min"),
            "max": hvd.allreduce(x, op=hvd.Max, name="fw_max"),
            "prod": hvd.allreduce(x / 10.0 + 1.0, op=hvd.Product, name="fw_prod"),
            "grouped": hvd.grouped_allreduce([x, rows[:1]], op=hvd.Sum, name="fw_grouped"),
            "gather": hvd.allgather(rows, name="fw_gather"),
            "grouped_gather": hvd.grouped_allgather([rows, x[:R + 1]], name="fw_grouped_gather"),
            "bcast": hvd.broadcast(x, root_rank=N - 1, name="fw_bcast"),
            "a2a": hvd.alltoall(sent, splits=splits, name="fw_a2a"),
            "a2a_even": hvd.alltoall(x[:N] * 0 + tf.range(N, dtype=tf.float32) + 10.0 * R, name="fw_a2a_even"),
            "rs": hvd.reducescatter(scatter_in, op=hvd.Sum, name="fw_rs"),
            "grouped_rs": hvd.grouped_reducescatter([scatter_in, scatter_in * 2], op=hvd.Average, name="fw_grs"),
        }
    xs = np.stack([np.arange(6, dtype=np.float64) + 10 * r for r in range(N)])
    blocks = [(2 * N + 1) // N + (1 if r < (2 * N + 1) % N else 0) for r in range(N)]  # the first ranks get more
    start = sum(blocks[:R])
    scatter_total = np.arange(2 * N + 1) * S
    for _ in range(2):  # the second call goes through the response cache
        out = everything(x, rows, sent, scatter_in)
        np.testing.assert_allclose(out["avg"].numpy(), xs.mean(axis=0), rtol=1e-6)
        np.testing.assert_array_equal(out["sum"].numpy(), xs.sum(axis=0))
        np.testing.assert_array_equal(out["min"].numpy(), xs.min(axis=0))
        np.testing.assert_array_equal(out["max"].numpy(), xs.max(axis=0))
        np.testing.assert_allclose(out["prod"].numpy(), np.prod(xs / 10.0 + 1.0, axis=0), rtol=1e-5)
        np.testing.assert_array_equal(out["grouped"][0].numpy(), xs.sum(axis=0))
        np.testing.assert_array_equal(out["grouped"][1].numpy(), [[float(sum(range(N)))] * 2])
        gathered = np.concatenate([np.full([r + 1, 2], float(r)) for r in range(N)])
        np.testing.assert_array_equal(out["gather"].numpy(), gathered)
        np.testing.assert_array_equal(out["grouped_gather"][0].numpy(), gathered)
        np.testing.assert_array_equal(out["grouped_gather"][1].numpy(), np.concatenate([xs[r, :r + 1]
                                                                                        for r in range(N)]))
        np.testing.assert_array_equal(out["bcast"].numpy(), xs[N - 1])
        received, received_splits = out["a2a"]
        np.testing.assert_array_equal(received_splits.numpy(), [(s + R) % 3 for s in range(N)])
        np.testing.assert_array_equal(received.numpy(), [100 * s + R for s in range(N) for _ in range((s + R) % 3)])
        np.testing.assert_array_equal(out["a2a_even"].numpy(), [R + 10.0 * s for s in range(N)])
        np.testing.assert_array_equal(out["rs"].numpy(), scatter_total[start:start + blocks[R]])
        np.testing.assert_allclose(out["grouped_rs"][0].numpy(), scatter_total[start:start + blocks[R]] / N,
                                   rtol=1e-6)
        np.testing.assert_allclose(out["grouped_rs"][1].numpy(), 2 * scatter_total[start:start + blocks[R]] / N,
                                   rtol=1e-6)


@pytest.mark.parametrize("graph", [False, True])
def test_min_allreduce_gradient_goes_to_the_winning_ranks(graph):
    # Element e's minimum is held by the rank with (e + r) % N == 0; the last element ties on every rank.
    x = tf.constant([float((e + R) % N) for e in range(N)] + [5.0])

    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = hvd.allreduce(x, op=hvd.Min, name="min_grad")
            loss = tf.reduce_sum(y * float(R + 1))  # rank-dependent upstream gradient
        return y, tape.gradient(loss, x)
    y, g = (tf.function(run) if graph else run)(x)
    np.testing.assert_array_equal(y.numpy(), [0.0] * N + [5.0])
    # docs/horovod-differences.md: the summed gradient goes to the ranks whose value won, zero elsewhere.
    want = [float(S) if (e + R) % N == 0 else 0.0 for e in range(N)] + [float(S)]
    np.testing.assert_array_equal(g.numpy(), want)


def tape_gradient(graph, **tape_kwargs):
    w = tf.Variable([1.0, 2.0])

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * float(R + 1))
        return hvd.DistributedGradientTape(tape, **tape_kwargs).gradient(loss, [w])[0]
    if not graph:
        return step(), None
    fn = tf.function(step)
    return fn(), fn.get_concrete_function().graph


@pytest.mark.parametrize("graph", [False, True])
def test_gradient_predivide_factor_scales_before_and_after_the_sum(graph):
    grad, g = tape_gradient(graph, gradient_predivide_factor=4.0)
    np.testing.assert_allclose(grad.numpy(), [S / N] * 2, rtol=1e-6)  # still the average
    if graph:  # and really split: 1/f before the sum, f (and 1/size) after it
        ops = [op for op in g.get_operations() if op.type in ("HorovodAllreduce", "HorovodGroupedAllreduce")]
        assert ops and all(op.get_attr("prescale_factor") == 0.25 and op.get_attr("postscale_factor") == 4.0
                           for op in ops), [(op.type, op.node_def.attr) for op in ops]


def test_gradient_predivide_factor_keeps_an_fp16_sum_finite_as_horovod():
    # Horovod's reason for the factor: with fp16 compression, N * 40000 overflows float16 (max 65504), 40000 does
    # not: (sum of x / N) * (N / N) = 40000, one rounding (scale.h FinishReduction); postscale by N before the
    # division by N would overflow.
    w = tf.Variable([1.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * 40000.0)
    grad = hvd.DistributedGradientTape(tape, compression=hvd.Compression.fp16,
                                       gradient_predivide_factor=float(N)).gradient(loss, [w])[0]
    np.testing.assert_allclose(grad.numpy(), [40000.0], rtol=1e-2)


def keras_step_model(optimizer):
    """w (one weight, 0) * x with loss mean(y_pred): dloss/dw = x, so a rank feeding x = r + 1 sends r + 1."""
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
    model.compile(optimizer=optimizer, loss=lambda y_true, y_pred: y_pred)
    return model


@pytest.mark.parametrize("graph", [False, True])
def test_op_sum_in_training_sums_the_gradients(graph):
    grad, _ = tape_gradient(graph, op=hvd.Sum)
    np.testing.assert_array_equal(grad.numpy(), [float(S)] * 2)
    model = keras_step_model(hvdk.DistributedOptimizer(keras.optimizers.SGD(0.5), op=hvd.Sum))
    x = np.full([4, 1], float(R + 1), np.float32)
    model.fit(x, np.zeros([4, 1], np.float32), batch_size=4, epochs=1, shuffle=False, verbose=0)
    np.testing.assert_allclose(model.get_weights()[0], [[-0.5 * S]], rtol=1e-6)  # Average would give -0.5 * S / N


def fit_recording_lr(callback, epochs, steps, initial_lr=0.5):
    """One SGD step per batch with gradient 1 on every rank: w ends at -(sum of the rates in force)."""
    model = keras_step_model(hvdk.DistributedOptimizer(keras.optimizers.SGD(initial_lr)))
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))
    x = np.ones([steps * 2, 1], np.float32)
    model.fit(x, np.zeros_like(x), batch_size=2, epochs=epochs, shuffle=False, verbose=0,
              callbacks=[callback, Record()])
    return seen, float(model.get_weights()[0][0, 0])


def test_learning_rate_schedule_callback_sets_the_rate_the_optimizer_uses():
    # staircase: initial_lr * multiplier(epoch) from start_epoch up to (not including) end_epoch, else unchanged.
    cb = hvdk.callbacks.LearningRateScheduleCallback(initial_lr=1.0, multiplier=lambda e: 0.1 ** e, start_epoch=1,
                                                     end_epoch=3)
    seen, w = fit_recording_lr(cb, epochs=4, steps=2)
    want = [0.5] * 2 + [0.1] * 2 + [0.01] * 4
    np.testing.assert_allclose(seen, want, rtol=1e-6)
    np.testing.assert_allclose(w, -sum(want), rtol=1e-5)  # the optimizer stepped with those rates
    # staircase=False: before every batch, with the fractional epoch (steps per epoch from Keras).
    cb = hvdk.callbacks.LearningRateScheduleCallback(initial_lr=0.2, multiplier=lambda e: 1.0 + e, staircase=False)
    seen, w = fit_recording_lr(cb, epochs=2, steps=4)
    want = [0.2 * (1.0 + e + b / 4.0) for e in range(2) for b in range(4)]
    np.testing.assert_allclose(seen, want, rtol=1e-6)
    np.testing.assert_allclose(w, -sum(want), rtol=1e-5)
    # A constant multiplier.
    seen, _ = fit_recording_lr(hvdk.callbacks.LearningRateScheduleCallback(0.3, 0.5), epochs=1, steps=2)
    np.testing.assert_allclose(seen, [0.15, 0.15], rtol=1e-6)


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2.0 ** 20


def test_unnamed_eager_collectives_do_not_grow_the_kernel_cache():
    # README: TF caches one kernel per distinct attr set (~35 KiB); unnamed eager collectives share one, so 1500
    # of them must not grow the process (1500 distinct names would add ~50 MiB).
    x = tf.ones([4])
    for _ in range(100):
        hvd.allreduce(x)
        hvd.allgather(x)
    before = rss_mib()
    for _ in range(750):
        hvd.allreduce(x)
        hvd.allgather(x)
    growth = rss_mib() - before
    assert growth < 16, "1500 unnamed eager collectives grew the process by %.1f MiB" % growth
