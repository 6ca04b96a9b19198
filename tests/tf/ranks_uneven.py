"""Uneven data: a rank that runs out of batches calls join() and keeps contributing zeros until every rank
has joined; through Keras fit and through a custom loop. Also shutdown() with an op pending."""
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring.keras as hvd
from rank_helpers import init, restarted

R, N = init()


@pytest.fixture(scope="module", autouse=True)
def runtime():
    # The last test shuts tfring down: the next file gets it started again.
    with restarted():
        yield


def same_everywhere(values):
    flat = np.concatenate([np.ravel(v) for v in values]).astype(np.float64)
    gathered = hvd.allgather(flat[None, :])
    return all(np.array_equal(gathered[0], g) for g in gathered)


def test_keras_fit_with_different_batch_counts_then_join():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    rng = np.random.RandomState(R)
    batches = 3 + 2 * R  # rank r has 3 + 2r batches
    model.fit(rng.randn(batches * 4, 3), rng.randn(batches * 4, 1), batch_size=4, epochs=1, shuffle=False,
              verbose=0)
    last = hvd.join()
    assert last == N - 1  # the rank with the most batches joins last
    # Ranks that stopped early missed the last updates: take the weights of the rank that saw every step.
    hvd.broadcast_global_variables(last, model=model)
    assert same_everywhere(model.get_weights())


def test_custom_loop_with_join_averages_over_every_rank():
    # As Horovod: a joined rank's zeros count in the average (the divisor is the job's size).
    w = tf.Variable([0.0])
    opt = keras.optimizers.SGD(1.0)
    for step in range(1 + R):  # rank r takes 1 + r steps
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * float(R + 1))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, [w])
        active = [r for r in range(N) if r >= step]
        assert grads[0].numpy()[0] == pytest.approx(sum(r + 1 for r in active) / N)
        opt.apply_gradients(zip(grads, [w]))
    assert hvd.join() == N - 1


def test_joined_ranks_contribute_zeros_to_large_and_small_tensors():
    # Rank r takes 1 + r steps; tensors >= 1 MiB take the direct path, small ones the fusion buffer.
    for step in range(1 + R):
        xs = [tf.fill([300000], float(R + 1)), tf.fill([5], float(R + 1))]
        outs = hvd.grouped_allreduce(xs, op=hvd.Average, name="join_mix")
        active = [r + 1 for r in range(N) if r >= step]
        for out in outs:
            np.testing.assert_allclose(out.numpy(), sum(active) / N)
    assert hvd.join() == N - 1


def test_shutdown_fails_pending_ops_instead_of_hanging():
    errors = []
    if R == 0:
        def pending():
            try:
                hvd.allreduce(tf.ones([2]), name="never_matched")
            except Exception as e:  # noqa: BLE001 - the error is the point
                errors.append(e)
        t = threading.Thread(target=pending)
        t.start()
        time.sleep(1.0)
        hvd.shutdown()
        t.join(timeout=10)
        assert not t.is_alive()
        assert errors and "shut down" in str(errors[0])
    else:
        time.sleep(3.0)  # rank 0's shutdown ends the runtime on every rank
        with pytest.raises(tf.errors.AbortedError, match="shut down by rank 0"):
            hvd.allreduce(tf.ones([2]), name="after_peer_shutdown")
        hvd.shutdown()
    assert not hvd.is_initialized()
