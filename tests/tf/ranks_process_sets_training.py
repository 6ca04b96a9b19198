"""process_set= through the training helpers with real process sets: at np=4 ranks {0, 1} form one set and {2, 3}
another (at np=3: {0, 1} and {2}; at np=2: {0} and {1}, since a set of every rank is the global set).
Averages, statistics and broadcasts must involve exactly the members of the caller's set."""
import keras
import numpy as np
import pytest
import tensorflow as tf
from mpi4py import MPI

import tfring
import tfring.keras as hvd
from rank_helpers import restarted

R, N = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
FIRST = [0, 1] if N > 2 else [0]
REST = list(range(len(FIRST), N))
first_set = tfring.ProcessSet(FIRST)
sets = [first_set] + ([tfring.ProcessSet(REST)] if REST else [])
MINE = first_set if R in FIRST else sets[1]
MEMBERS = MINE.ranks


@pytest.fixture(scope="module", autouse=True)
def runtime():
    with restarted(process_sets=sets):
        yield


def test_tape_averages_over_the_set_and_scales_local_by_its_size():
    a, b = tf.Variable([1.0, 1.0]), tf.Variable([1.0])
    with tf.GradientTape() as tape:
        loss = (tf.reduce_sum(a) + tf.reduce_sum(b)) * (R + 1)
    dtape = tfring.DistributedGradientTape(tape, process_set=MINE)
    dtape.register_local_source(b)
    ga, gb = dtape.gradient(loss, [a, b])
    np.testing.assert_allclose(ga.numpy(), [np.mean([r + 1 for r in MEMBERS])] * 2, rtol=1e-6)
    np.testing.assert_allclose(gb.numpy(), [(R + 1) / len(MEMBERS)], rtol=1e-6)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(a) * (R + 1)
    g = tfring.DistributedGradientTape(tape, process_set=tfring.global_process_set).gradient(loss, a)
    np.testing.assert_allclose(g.numpy(), [(N + 1) / 2.0] * 2, rtol=1e-6)


def test_sync_batch_norm_uses_the_members_batches():
    xs = {r: (np.random.RandomState(r).randn(r + 2, 2) + 4.0 * r).astype("float32") for r in range(N)}
    layer = hvd.SyncBatchNormalization(momentum=0.0, epsilon=0.0, process_set=MINE)
    out = layer(tf.constant(xs[R]), training=True).numpy()
    members = np.concatenate([xs[r] for r in MEMBERS]).astype(np.float64)
    np.testing.assert_allclose(layer.moving_mean.numpy(), members.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), members.var(0), rtol=1e-5)
    np.testing.assert_allclose(out, (xs[R] - members.mean(0)) / members.std(0), rtol=1e-4, atol=1e-4)


def test_object_helpers_and_inplace_broadcast_within_the_set():
    root = MEMBERS[-1]
    assert tfring.broadcast_object(("from", R), root, process_set=MINE) == ("from", root)
    assert tfring.allgather_object(R * 10, process_set=MINE) == [r * 10 for r in MEMBERS]
    v = tf.Variable([float(R)] * 3)
    np.testing.assert_array_equal(tfring.broadcast_([v], root, process_set=MINE)[0].numpy(), [float(root)] * 3)
    np.testing.assert_array_equal(v.numpy(), [float(root)] * 3)
    assert tfring.broadcast_object_fn(root, process_set=MINE)(R) == root


def test_keras_training_and_callbacks_within_the_set():
    keras.utils.set_random_seed(100 + R)  # different initial weights everywhere: the broadcast fixes them per set
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05), process_set=MINE), loss="mse")
    seen, raw = [], []

    class Raw(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raw.append(logs["loss"])

    class Record(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append(logs["loss"])
    rng = np.random.RandomState(R)
    x, y = rng.randn(8, 3).astype("float32"), rng.randn(8, 2).astype("float32")
    warmup = hvd.callbacks.LearningRateWarmupCallback(0.05, warmup_epochs=2, steps_per_epoch=2, process_set=MINE)
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(MEMBERS[0], process_set=MINE), Raw(),
        hvd.callbacks.MetricAverageCallback(process_set=MINE), Record(), warmup])
    assert abs(warmup.multiplier(0.0) - 1.0 / len(MEMBERS)) < 1e-12
    weights = tfring.allgather_object(model.get_weights(), process_set=MINE)
    for other in weights:
        for a, b in zip(other, model.get_weights()):
            np.testing.assert_array_equal(a, b)  # identical within the set
    losses = tfring.allgather_object(seen[0], process_set=MINE)
    assert len(set(losses)) == 1  # every member logs the set's average
    members_raw = tfring.allgather_object(raw[0], process_set=MINE)
    assert abs(seen[0] - np.mean(members_raw)) < 1e-6 * max(1.0, abs(np.mean(members_raw)))  # over the set only
    everyone_raw = tfring.allgather_object(raw[0])
    assert abs(np.mean(everyone_raw) - np.mean(members_raw)) > 1e-6  # (so a global average would be caught)
    everyone = tfring.allgather_object((R, model.get_weights()[0]))
    assert not np.allclose(everyone[0][1], everyone[N - 1][1])  # the sets trained apart


def test_outside_the_set_or_alone_gradients_are_unchanged():
    """Horovod's _allreduce_cond: a rank outside the process set, or in a set of one rank, keeps its own
    gradients (local ones unscaled) instead of failing; the members of a larger set average."""
    for ps in (first_set, MINE):  # np=2: {0} and {1}, sets of one rank; np=3: rank 2 is outside {0, 1}
        averages = R in ps.ranks and len(ps.ranks) > 1
        a, b = tf.Variable([1.0, 1.0]), tf.Variable([1.0])
        with tf.GradientTape() as tape:
            loss = (tf.reduce_sum(a) + tf.reduce_sum(b)) * (R + 1)
        dtape = tfring.DistributedGradientTape(tape, process_set=ps)
        dtape.register_local_source(b)
        ga, gb = dtape.gradient(loss, [a, b])
        want_a = np.mean([r + 1.0 for r in ps.ranks]) if averages else R + 1.0
        want_b = (R + 1.0) / len(ps.ranks) if averages else R + 1.0
        np.testing.assert_allclose(ga.numpy(), [want_a] * 2, rtol=1e-6)
        np.testing.assert_allclose(gb.numpy(), [want_b], rtol=1e-6)
        # The Keras 3 optimizer reduces through the same GradientReducer.
        v = tf.Variable([0.0, 0.0])
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), process_set=ps)
        opt.apply([tf.constant([R + 1.0, -(R + 1.0)])], [v])
        np.testing.assert_allclose(v.numpy(), [-want_a, want_a], rtol=1e-6)
