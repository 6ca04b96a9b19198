"""broadcast_ (in place), broadcast_global_variables (TF1-style graphs), broadcast_object_fn, process_set=None
pass-through of the object helpers and callbacks, and BroadcastGlobalVariablesCallback's local variables."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as hvd
from rank_helpers import init

R, N = init()
ROOT = N - 1


def rank_vars():
    return [tf.Variable(np.full([2], R + 1.0, np.float32)), tf.Variable(np.arange(3, dtype=np.int64) * (R + 1)),
            keras.Variable(np.full([2, 2], 10.0 * (R + 1), np.float32))]


def root_values():
    return [np.full([2], ROOT + 1.0), np.arange(3) * (ROOT + 1), np.full([2, 2], 10.0 * (ROOT + 1))]


@pytest.mark.parametrize("graph", [False, True])
def test_broadcast_inplace_returns_and_assigns_root_values(graph):
    vs = rank_vars()
    run = lambda: tfring.broadcast_(vs, ROOT, name="inplace", process_set=None)  # noqa: E731
    got = (tf.function(run) if graph else run)()
    assert tfring.broadcast_ is hvd.broadcast_
    for v, g, want in zip(vs, got, root_values()):
        np.testing.assert_array_equal(np.asarray(g), want)
        np.testing.assert_array_equal(tf.convert_to_tensor(v).numpy(), want)
    with pytest.raises(TypeError, match=r"pass \[variable\]"):
        tfring.broadcast_(vs[0], ROOT)
    with pytest.raises(TypeError, match="tf.Variable / keras.Variable"):
        tfring.broadcast_([tf.constant(1.0)], ROOT)


def test_broadcast_variables_process_set_and_inplace():
    vs = rank_vars()
    tfring.broadcast_variables(vs, ROOT, process_set=None, inplace=True)
    for v, want in zip(vs, root_values()):
        np.testing.assert_array_equal(tf.convert_to_tensor(v).numpy(), want)


def test_object_helpers_with_process_set():
    obj = {"rank": R, "payload": list(range(R + 1))} if R == ROOT else None
    assert tfring.broadcast_object(obj, ROOT, process_set=None) == {"rank": ROOT, "payload": list(range(N))}
    assert tfring.allgather_object(("r", R), process_set=None) == [("r", r) for r in range(N)]
    bcast = tfring.broadcast_object_fn(root_rank=ROOT, process_set=None)
    for i in range(2):
        assert bcast([R, i]) == [ROOT, i]


def test_object_helpers_carry_lambdas_closures_and_local_classes():
    # Plain pickle refuses all three (lambdas and local classes are pickled by reference); Horovod uses cloudpickle.
    scale = 10 * (R + 1)

    class Local:
        def __init__(self, v):
            self.v = v
    fn = tfring.broadcast_object(lambda x: x * scale, ROOT)
    assert fn(2) == 2 * 10 * (ROOT + 1)
    got = tfring.allgather_object(Local(R))
    assert [o.v for o in got] == list(range(N)) and all(type(o).__name__ == "Local" for o in got)
    fns = tfring.allgather_object(lambda: R)
    assert [f() for f in fns] == list(range(N))
    assert tfring.broadcast_object_fn(ROOT)(lambda: R)() == ROOT


def test_broadcast_global_variables_is_graph_only_like_horovod():
    with pytest.raises(RuntimeError, match="does not support eager execution"):
        tfring.broadcast_global_variables(0)


def test_graph_mode_global_variables_and_object_fn():
    """TF1-style: a graph, global variables and a session; the broadcast ops are built once, run per call."""
    with tf.Graph().as_default():
        a = tf.compat.v1.get_variable("a", initializer=np.full([3], R + 1.0, np.float32))
        b = tf.compat.v1.get_variable("b", initializer=np.int32(R * 7))
        bcast_op = tfring.broadcast_global_variables(ROOT, process_set=None)
        bcast_obj = tfring.broadcast_object_fn(ROOT, name="graph_obj")
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(bcast_op)
            np.testing.assert_array_equal(sess.run(a), np.full([3], ROOT + 1.0))
            assert sess.run(b) == ROOT * 7
            assert bcast_obj({"from": R}) == {"from": ROOT}
            assert tfring.broadcast_object("s%d" % R, ROOT, session=sess, name="graph_bo") == "s%d" % ROOT
            assert tfring.allgather_object(R, session=sess) == list(range(N))


def test_callbacks_with_process_set_and_local_variables():
    keras.utils.set_random_seed(100 + R)  # different initial weights per rank
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    initial = model.get_weights()
    root_initial = hvd.broadcast_object(initial, 0)
    local = model.layers[1].kernel
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.0), process_set=None), loss="mse")
    raw, averaged = [], []

    class Before(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raw.append(logs["loss"])

    class After(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            averaged.append(logs["loss"])
    rng = np.random.RandomState(R)
    model.fit(rng.randn(8, 3), rng.randn(8, 1), batch_size=4, epochs=1, verbose=0, callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[local], process_set=None), Before(),
        hvd.callbacks.MetricAverageCallback(process_set=None), After(),
        hvd.callbacks.LearningRateWarmupCallback(0.0, warmup_epochs=1, steps_per_epoch=2, process_set=None)])
    got = model.get_weights()  # learning rate 0: only the broadcast changed weights
    for i in (0, 1, 3):
        np.testing.assert_array_equal(got[i], root_initial[i])
    np.testing.assert_array_equal(got[2], initial[2])  # the local kernel kept this rank's own values
    assert R == 0 or not np.array_equal(initial[2], root_initial[2])
    everyone = np.asarray(hvd.allgather(np.array([raw[0]]), process_set=None))  # tfring.keras returns tensors
    assert abs(averaged[0] - everyone.mean()) < 1e-6 * max(1.0, abs(everyone.mean()))
    with pytest.raises(ValueError, match="local_variables must be variables"):
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=["kernel"])
