"""tf_keras (TF_USE_LEGACY_KERAS=1) DistributedOptimizer: subclasses and legacy OptimizerV2s get the tf_keras
wrapper, backward_passes_per_step with Horovod's semantics, Horovod's private helpers (_compute_gradients,
_agg_helper.counter), config round trips and process sets, against values every rank computes for itself."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import copy  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from mpi4py import MPI  # noqa: E402

import tfring  # noqa: E402
import tfring.keras as hvd  # noqa: E402
from tfring.tensorflow.tf_keras.optimizer import LegacyDistributedOptimizer  # noqa: E402
from rank_helpers import restarted  # noqa: E402
from sim_helpers import local_grads, rank_batch, small_model  # noqa: E402

R, N = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
FIRST = [0, 1] if N > 2 else [0]  # np=3: rank 2 is outside; np=2: a set of one rank
first_set = tfring.ProcessSet(FIRST)
last_set = tfring.ProcessSet([N - 1])  # a set of one rank at any size (np=3: {2})
MEAN = (N + 1) / 2.0  # mean over ranks of R + 1


@pytest.fixture(scope="module", autouse=True)
def runtime():
    with restarted(process_sets=[first_set, last_set]):
        yield


class MySGD(tf_keras.optimizers.SGD):
    """A user's subclass: its module is this file, not tf_keras."""


class AddOptimizer(tf_keras.optimizers.Optimizer):
    """variable += gradient, so a variable shows exactly the gradients applied (as in Horovod's tests)."""

    def __init__(self, name="add", **kwargs):
        super().__init__(name=name, **kwargs)
        self._learning_rate = self._build_learning_rate(0.1)

    def update_step(self, gradient, variable):
        variable.assign_add(gradient)





def test_tf_keras_optimizers_of_any_module_get_the_tf_keras_wrapper():
    for inner in (MySGD(0.1), AddOptimizer(), tf_keras.optimizers.legacy.SGD(0.1), tf_keras.optimizers.legacy.Adam()):
        opt = hvd.DistributedOptimizer(inner)
        assert isinstance(opt, LegacyDistributedOptimizer) and opt.inner_optimizer is inner, inner
    assert not isinstance(hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), tf_keras.optimizers.Optimizer)
    with pytest.raises(TypeError, match="optimizer must be a tf_keras"):
        LegacyDistributedOptimizer("sgd")
    with pytest.raises(ValueError, match="backward_passes_per_step=0"):
        hvd.DistributedOptimizer(MySGD(0.1), backward_passes_per_step=0)
    with pytest.raises(ValueError, match="compression='zip'"):
        hvd.DistributedOptimizer(MySGD(0.1), compression="zip")


@pytest.mark.parametrize("make", [lambda: MySGD(0.1), lambda: tf_keras.optimizers.legacy.SGD(0.1)])
def test_fit_averages_with_subclasses_and_legacy_optimizers(make):
    steps = 2
    model = small_model(tf_keras)
    opt = hvd.DistributedOptimizer(make())
    model.compile(optimizer=opt, loss="mse")
    x, y = rank_batch(R)
    model.fit(np.tile(x, (steps, 1)), np.tile(y, (steps, 1)), batch_size=4, epochs=1, shuffle=False, verbose=0)
    sim = small_model(tf_keras)
    for _ in range(steps):
        grads = [local_grads(tf_keras, sim, r) for r in range(N)]
        for i, v in enumerate(sim.trainable_variables):
            v.assign(v.numpy() - 0.1 * np.mean([g[i] for g in grads], axis=0))
    for got, want in zip(model.get_weights(), sim.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert opt.iterations.numpy() == steps


def expected_after(passes, k, average, sign):
    """x (global), table (sparse gradient), l (local) after `passes` passes; pass p's gradient is c = (R+1) p."""
    x, table, loc = np.ones(2), np.ones((3, 2)), np.ones(1)
    for cycle in range(passes // k):
        total = float(sum(range(cycle * k + 1, cycle * k + k + 1))) / (k if average else 1)
        x += sign * MEAN * total
        for r in range(N):
            table[r % 3] += sign * (r + 1) * total / N
        loc += sign * (R + 1) * total / N  # local: this rank's own sum, scaled by the size (Horovod)
    return x, table, loc


@pytest.mark.parametrize("average", [False, True])
@pytest.mark.parametrize("mode", ["apply", "function", "compute"])
@pytest.mark.parametrize("inner", ["add", "legacy_sgd"])
def test_backward_passes_per_step_has_horovods_semantics(average, mode, inner):
    k, passes = 3, 7
    sign = 1.0 if inner == "add" else -1.0
    opt = hvd.DistributedOptimizer(AddOptimizer() if inner == "add" else tf_keras.optimizers.legacy.SGD(1.0),
                                   backward_passes_per_step=k, average_aggregated_gradients=average,
                                   sparse_as_dense=(mode == "compute"))
    x, table, loc = tf.Variable(np.ones(2, "float32")), tf.Variable(np.ones((3, 2), "float32")), tf.Variable([1.0])
    variables = [x, table, loc]
    opt.register_local_var(loc)

    def loss(c):
        return c * (tf.reduce_sum(x) + tf.reduce_sum(tf.gather(table, [R % 3])) + tf.reduce_sum(loc))

    def step(c):
        if mode == "compute":
            grads_and_vars = opt._compute_gradients(lambda: loss(c), variables)
        else:
            with tf.GradientTape() as tape:
                value = loss(c)
            grads_and_vars = list(zip(tape.gradient(value, variables), variables))
        opt.apply_gradients(grads_and_vars)
        return [g for g, _ in grads_and_vars]
    run = step if mode == "apply" else tf.function(step)
    for p in range(1, passes + 1):
        returned = run(tf.constant((R + 1.0) * p))
        want = expected_after(p, k, average, sign)
        for v, w in zip(variables, want):
            np.testing.assert_allclose(v.numpy(), w, rtol=1e-6, err_msg="pass %d %s" % (p, v.name))
        assert opt.iterations.numpy() == p and opt._agg_helper.counter.numpy() == p % k
        if mode == "compute":  # Horovod: the running local sum, or on the k-th pass what gets applied
            done = expected_after(p - p % k - k, k, average, sign) if p % k == 0 else None
            if done is not None:
                np.testing.assert_allclose(sign * returned[0].numpy(), want[0] - done[0], rtol=1e-6)
            else:
                local_sum = (R + 1.0) * sum(range(p - p % k + 1, p + 1))
                np.testing.assert_allclose(returned[0].numpy(), [local_sum] * 2, rtol=1e-6)


def test_inf_gradient_does_not_leak_into_the_next_cycle():
    opt = hvd.DistributedOptimizer(tf_keras.optimizers.SGD(1.0), backward_passes_per_step=2, sparse_as_dense=True)
    u, v = tf.Variable(0.0), tf.Variable([0.0, 0.0])
    for p in range(4):
        scale = float("inf") if p == 0 else 1.0
        grads_and_vars = opt._compute_gradients(lambda: u * scale + tf.reduce_sum(v) * (R + 1), [u, v])
        opt.apply_gradients(grads_and_vars)
    assert not np.isfinite(u.numpy())  # the first cycle applied an infinite gradient
    assert grads_and_vars[0][0].numpy() == 2.0  # the second cycle's sum: the inf is gone
    np.testing.assert_allclose(v.numpy(), [-4.0 * MEAN] * 2, rtol=1e-6)


def test_compute_gradients_with_a_tape_reduces_once():
    model = small_model(tf_keras)
    want_all = [local_grads(tf_keras, model, r) for r in range(N)]
    before = [w.copy() for w in model.get_weights()]
    x, y = rank_batch(R)
    with tf.GradientTape(persistent=True) as tape:
        loss = tf_keras.losses.MeanSquaredError()(y, model(x))
    opt = hvd.PartialDistributedOptimizer(tf_keras.optimizers.SGD(1.0), local_layers=model.layers[1],
                                          sparse_as_dense=True)
    grads_and_vars = opt._compute_gradients(loss, model.trainable_weights, tape=tape)
    opt.apply_gradients(grads_and_vars)  # already reduced: applied as they are
    for i, ((g, var), w0) in enumerate(zip(grads_and_vars, before)):
        assert var is model.trainable_weights[i]
        want = want_all[R][i] / N if i >= 2 else np.mean([w[i] for w in want_all], axis=0)
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(var.numpy(), w0 - want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [lambda: tf_keras.optimizers.Adam(0.01),
                                  lambda: tf_keras.optimizers.legacy.Adam(0.01)])
def test_config_round_trip_keeps_aggregation_and_leaves_the_config_alone(make):
    inner = make()
    opt = hvd.DistributedOptimizer(inner, backward_passes_per_step=3, average_aggregated_gradients=True,
                                   compression=tfring.Compression.fp16)
    config = opt.get_config()
    before = copy.deepcopy(config)
    again = opt.from_config(config)
    assert config == before and again.get_config() == config
    assert type(again.inner_optimizer) is type(inner) and again._agg_helper.backward_passes_per_step == 3
    assert again._agg_helper.average_aggregated_gradients and config["compression"] == "fp16"


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("which", ["first", "last"])
def test_process_set_members_average_the_others_keep_their_gradient(which, k):
    ps = first_set if which == "first" else last_set  # members of a set of one rank keep their gradient too
    v = tf.Variable([0.0])
    opt = hvd.DistributedOptimizer(tf_keras.optimizers.SGD(1.0), process_set=ps, backward_passes_per_step=k)
    for _ in range(k):
        opt.apply_gradients([(tf.constant([R + 1.0]), v)])
    per_pass = np.mean([r + 1.0 for r in ps.ranks]) if R in ps.ranks and len(ps.ranks) > 1 else R + 1.0
    np.testing.assert_allclose(v.numpy(), [-k * per_pass], rtol=1e-6)
