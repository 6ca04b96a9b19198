"""A small two-layer model, per-rank batches and plain (undistributed) gradients, for Keras 3 and tf_keras alike:
rank tests compute every rank's expected update here and compare with what the distributed run did."""
import numpy as np
import tensorflow as tf


def small_model(k, seed=0):
    """k: the keras module in use (keras or tf_keras)."""
    k.utils.set_random_seed(seed)
    return k.Sequential([k.layers.InputLayer(input_shape=(3,)) if k.__name__ == "tf_keras" else k.Input((3,)),
                         k.layers.Dense(4, activation="tanh"), k.layers.Dense(2)])


def rank_batch(r, rows=4):
    rng = np.random.RandomState(20 + r)
    return rng.randn(rows, 3).astype("float32"), rng.randn(rows, 2).astype("float32")


def local_grads(k, model, r):
    x, y = rank_batch(r)
    with tf.GradientTape() as tape:
        loss = k.losses.MeanSquaredError()(y, model(x))
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


def simulate_partial_sgd(k, n, steps, scale, lr=0.1):
    """Every rank's model after `steps` of SGD where the first layer's gradients are averaged over the n ranks and
    the second (local) layer keeps each rank's own gradient (divided by n when `scale`)."""
    sims = [small_model(k) for _ in range(n)]
    for _ in range(steps):
        grads = [local_grads(k, m, r) for r, m in enumerate(sims)]
        for r, m in enumerate(sims):
            for i, v in enumerate(m.trainable_variables):
                g = grads[r][i] / (n if scale else 1) if i >= 2 else np.mean([gr[i] for gr in grads], axis=0)
                v.assign(v.numpy() - lr * g)
    return sims
