"""A custom TensorFlow loop with a sharded optimizer (#46): `import tfring as hvd`, a plain tf.GradientTape inside a
tf.function and `hvd.DistributedOptimizer(keras Adam, sharded=True)`, whose apply_gradients reduce-scatters the
gradients itself, ends with the weights of Horovod's recipe (DistributedGradientTape + an unsharded optimizer),
identical on every rank, while each rank's Adam state holds its shard only; with backward_passes_per_step it ends
as the unsharded optimizer with the same passes (stage 2 accumulating only its shard of the gradients); a
tf.compat.v1 optimizer refuses sharding by name."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init

R, N = init()
STEPS = 5


def make_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((7,)), keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(1)])
    return model


def batch(step):
    rng = np.random.default_rng(10 * step + R)
    return tf.constant(rng.normal(size=(4, 7)), tf.float32), tf.constant(rng.normal(size=(4, 1)), tf.float32)


def train(sharded, passes=1):
    model = make_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), sharded=sharded, backward_passes_per_step=passes)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        if not sharded and passes == 1:  # Horovod's recipe; the optimizer reduces the plain tape's gradients itself
            tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    for s in range(STEPS):
        step(*batch(s))
    return model, opt


def test_a_tape_loop_with_a_sharded_optimizer_equals_horovods_recipe_keeping_only_its_shard():
    sharded, opt = train(True)
    plain, _ = train(False)
    for got, want in zip(sharded.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg="rank %d" % R)
        gathered = hvd.allgather(tf.constant(got[None]))
        assert all(np.array_equal(gathered[i].numpy(), got) for i in range(N))
    total = sum(int(np.prod(w.shape)) for w in sharded.trainable_variables)  # 55 weights: every size pads
    slots = [v for v in opt.inner_optimizer.variables if len(v.shape) == 1 and "param_shard" in v.path]
    assert slots and all(v.shape[0] == -(-total // N) for v in slots), [(v.path, v.shape) for v in slots]


@pytest.mark.parametrize("stage", [1, 2])
def test_backward_passes_in_a_tape_loop_end_as_the_unsharded_optimizer(stage):
    # 5 steps, 2 passes per update: two updates, and the fifth pass left accumulated (in the state compared below)
    sharded, opt = train(stage, passes=2)
    plain, plain_opt = train(False, passes=2)
    for got, want in zip(sharded.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg="rank %d" % R)
        gathered = hvd.allgather(tf.constant(got[None]))
        assert all(np.array_equal(gathered[i].numpy(), got) for i in range(N))
    assert any(not np.allclose(a, b) for a, b in zip(sharded.get_weights(), make_model().get_weights()))
    mine, theirs = {}, {}
    opt.save_own_variables(mine)  # the unsharded layout, the accumulated fifth pass included
    plain_opt.save_own_variables(theirs)
    assert len(mine) == len(theirs)
    for k in theirs:
        want = np.asarray(theirs[k], np.float64)
        if stage == 2:  # its accumulators hold the pass already averaged over the ranks; the unsharded one's, local
            want = hvd.allreduce(tf.constant(want), op=hvd.Average, name="want.%s" % k).numpy()
        np.testing.assert_allclose(np.asarray(mine[k]), want, rtol=1e-5, atol=1e-6, err_msg=k)
    total = sum(int(np.prod(w.shape)) for w in sharded.trainable_variables)
    held = [int(np.prod(a.shape)) for a in opt._accumulators]
    assert held == ([-(-total // N)] if stage == 2 else [int(np.prod(w.shape)) for w in sharded.trainable_variables])


def test_a_tf_compat_v1_optimizer_refuses_sharding_by_name():
    with pytest.raises(ValueError, match=r"sharded=True needs a Keras optimizer"):
        hvd.DistributedOptimizer(tf.compat.v1.train.AdamOptimizer(0.01), sharded=True)
