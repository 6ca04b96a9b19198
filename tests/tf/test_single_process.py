"""Size 1, no launcher: `python train.py` must work, and the op library must behave like Horovod's."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from conftest import ROOT, rank_env

OP_NAMES = ["HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather", "HorovodGroupedAllgather",
            "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter", "HorovodGroupedReducescatter",
            "HorovodJoin", "HorovodBarrier", "HorovodSize", "HorovodRank", "HorovodLocalSize", "HorovodLocalRank"]


@pytest.fixture(scope="module", autouse=True)
def initialized():
    hvd.init()
    yield


def test_topology_without_launcher():
    assert (hvd.size(), hvd.rank(), hvd.local_size(), hvd.local_rank()) == (1, 0, 1, 0)
    assert (hvd.cross_size(), hvd.cross_rank()) == (1, 0)
    assert hvd.is_initialized() and hvd.is_homogeneous()


def test_ops_registered_stateful_with_horovod_attrs():
    from tensorflow.python.framework import op_def_registry
    for name in OP_NAMES:
        op_def = op_def_registry.get(name)
        assert op_def is not None, name
        assert op_def.is_stateful, name  # never constant-folded or pruned
    attrs = {a.name for a in op_def_registry.get("HorovodAllreduce").attr}
    assert {"T", "reduce_op", "prescale_factor", "postscale_factor", "ignore_name_scope",
            "process_set_id"} <= attrs
    assert "root_rank" in {a.name for a in op_def_registry.get("HorovodBroadcast").attr}


def test_identity_collectives_at_size_one():
    x = tf.reshape(tf.range(6, dtype=tf.float32), [2, 3])
    np.testing.assert_array_equal(hvd.allreduce(x).numpy(), x.numpy())
    np.testing.assert_array_equal(hvd.allreduce(x, prescale_factor=2.0, op=hvd.Sum).numpy(), 2 * x.numpy())
    np.testing.assert_array_equal(hvd.allgather(x).numpy(), x.numpy())
    np.testing.assert_array_equal(hvd.broadcast(x, 0).numpy(), x.numpy())
    np.testing.assert_array_equal(hvd.alltoall(x).numpy(), x.numpy())
    out, splits = hvd.alltoall(x, splits=[2])
    np.testing.assert_array_equal(out.numpy(), x.numpy())
    assert splits.numpy().tolist() == [2]
    np.testing.assert_array_equal(hvd.reducescatter(x, op=hvd.Sum).numpy(), x.numpy())
    assert hvd.join() == 0
    hvd.barrier()


# ignore_name_scope is an identity at size 1: tests/tf/ranks_name_scope.py tests it on real ranks.


def test_knob_table_lists_settings():
    names = [row[0] for row in hvd.knob_table()]
    for knob in ["TFRING_FUSION_THRESHOLD", "TFRING_CYCLE_TIME", "TFRING_CACHE_CAPACITY", "TFRING_LOG_LEVEL"]:
        assert knob in names


def run_script(code, env=None):
    e = rank_env()
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=e, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)


def test_lifecycle_errors_and_reinit():
    proc = run_script("""
        import tensorflow as tf, tfring as hvd
        try:
            hvd.allreduce(tf.ones([1]))
        except ValueError as e:
            print("BEFORE_INIT:", e)
        try:
            tf.function(lambda: hvd.allreduce(tf.ones([1])))()
        except tf.errors.FailedPreconditionError as e:
            print("GRAPH_BEFORE_INIT:", e.message)
        try:
            hvd.size()
        except ValueError as e:
            print("SIZE:", e)
        hvd.init()
        hvd.shutdown()
        try:
            hvd.allgather(tf.ones([1]))
        except ValueError as e:
            print("AFTER_SHUTDOWN:", e)
        hvd.init()
        print("REINIT:", hvd.allreduce(tf.ones([2])).numpy().tolist())
    """)
    assert proc.returncode == 0, proc.stdout
    assert "BEFORE_INIT: tfring.allreduce: tfring has not been initialized" in proc.stdout
    assert "tfring has not been initialized (or was shut down); call tfring.init() first" in \
        proc.stdout.split("GRAPH_BEFORE_INIT:")[1]
    assert "SIZE: tfring has not been initialized" in proc.stdout
    assert "AFTER_SHUTDOWN: tfring.allgather: tfring has not been initialized" in proc.stdout
    assert "REINIT: [1.0, 1.0]" in proc.stdout


def test_hvd_knobs_accept_horovod_aliases():
    proc = run_script("""
        import tfring as hvd, tensorflow as tf
        hvd.init()
        print(hvd.allreduce(tf.ones([3])).numpy().tolist())
    """, env={"HOROVOD_FUSION_THRESHOLD": "0", "HOROVOD_LOG_LEVEL": "debug"})
    assert proc.returncode == 0, proc.stdout
    assert "fusion 0 B" in proc.stdout


def test_library_built_for_other_tf_is_refused(tmp_path):
    import json
    import shutil
    pkg = tmp_path / "tfring"
    shutil.copytree(os.path.dirname(hvd.__file__), pkg)
    (pkg / "build_info.json").write_text(json.dumps({"tensorflow": "2.15.0"}))
    proc = subprocess.run([sys.executable, "-c", "import tfring as hvd; hvd.init()"], cwd=str(tmp_path),
                          env=dict(rank_env(), PYTHONPATH=str(tmp_path)), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode != 0
    assert "built for TensorFlow 2.15.0 but TensorFlow 2.21" in proc.stdout
    assert "Rebuild tfring" in proc.stdout


def test_keras_wrapper_at_size_one_is_bitwise_identical_and_round_trips_config():
    import keras
    import tfring.keras as hvdk

    def train(wrap):
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(1)])
        opt = keras.optimizers.Adam(0.01)
        model.compile(optimizer=hvdk.DistributedOptimizer(opt) if wrap else opt, loss="mse")
        rng = np.random.RandomState(0)
        model.fit(rng.randn(32, 4), rng.randn(32, 1), batch_size=8, epochs=2, shuffle=False, verbose=0)
        return model
    for a, b in zip(train(False).get_weights(), train(True).get_weights()):
        np.testing.assert_array_equal(a, b)
    opt = hvdk.DistributedOptimizer(keras.optimizers.SGD(0.3, momentum=0.5), op=hvd.Sum,
                                    compression=hvd.Compression.fp16, backward_passes_per_step=3)
    back = hvdk.DistributedOptimizer.from_config(opt.get_config())
    assert back.get_config() == opt.get_config()
    assert back.backward_passes_per_step == 3 and back.compression is hvd.Compression.fp16
    assert abs(float(back.inner_optimizer.learning_rate) - 0.3) < 1e-7
    back.learning_rate = 0.1  # settable, reaches the inner optimizer
    assert abs(float(back.inner_optimizer.learning_rate) - 0.1) < 1e-7
    with pytest.raises(ValueError, match="backward_passes_per_step=0"):
        hvdk.DistributedOptimizer(keras.optimizers.SGD(), backward_passes_per_step=0)
    with pytest.raises(TypeError, match="optimizer must be"):
        hvdk.DistributedOptimizer("sgd")


def test_elastic_state_commit_restore_and_run_at_size_1():
    import keras

    import tfring.keras as hvd_keras
    assert hvd.elastic.run is hvd_keras.elastic.run
    assert hvd_keras.elastic.KerasState.__module__ == "tfring.keras.elastic"
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1))
    state = hvd_keras.elastic.KerasState(model, opt, epoch=0, batch=0)
    state.sync()  # builds the optimizer: its variables are part of the state
    assert opt.built
    before = [v.numpy().copy() for v in model.variables]
    state.epoch = 3
    state.commit()
    for v in model.variables:
        v.assign(v + 1.0)
    state.epoch = 7
    state.restore()
    assert state.epoch == 3
    for a, v in zip(before, model.variables):
        np.testing.assert_array_equal(a, v.numpy())
    calls = []
    state.register_reset_callbacks([lambda: calls.append(hvd.size())])

    @hvd.elastic.run
    def fails(st):
        raise RuntimeError("tfring: a worker process failed or left the job (test)")

    # Not under tfringrun's elastic mode: the failure is reported, not retried.
    with pytest.raises(hvd.elastic.HorovodInternalError, match="does not run in elastic mode"):
        fails(state)

    @hvd.elastic.run
    def other(st):
        raise KeyError("not a worker failure")

    with pytest.raises(KeyError):  # other errors pass through unchanged
        other(state)
    assert calls == []
    with pytest.raises(ValueError, match="batches_per_commit=0"):
        hvd_keras.elastic.CommitStateCallback(state, batches_per_commit=0)
    with pytest.raises(ValueError, match="session="):
        hvd.elastic.TensorFlowState([], session=object())


def test_horovod_names_that_are_not_built_say_so():
    assert not hvd.ccl_built() and not hvd.ddl_built() and not hvd.gloo_built() and hvd.mpi_built()
    assert [hvd.check_num_rank_power_of_2(n) for n in (1, 2, 3, 4, 6, 8)] == [True, True, False, True, False, True]
    assert hvd.handle_average_backwards_compatibility(None, False) == hvd.Sum
    with pytest.raises(ValueError, match="either op or the deprecated average"):
        hvd.handle_average_backwards_compatibility(hvd.Sum, True)


def test_stall_deadline_is_on_by_default():
    # Never wait forever by default (issue: a rank that never submits must not hang the others): 30 minutes.
    knobs = {name: default for name, _, default, _ in hvd.knob_table()}
    assert knobs["TFRING_STALL_SHUTDOWN_TIME_SECONDS"] == "1800" and knobs["TFRING_STALL_CHECK_TIME_SECONDS"] == "60"
    assert knobs["TFRING_DYNAMIC_PROCESS_SETS"] == "0"
