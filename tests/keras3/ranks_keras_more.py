"""tfring.keras on real ranks, beyond the recipe of ranks_keras.py: SyncBatchNormalization, process sets, groups,
worker-local layers, the LR schedule callback, uncompiled steps and the collectives of Keras values, on the
backend Keras runs (KERAS_BACKEND)."""
import keras
import numpy as np
import pytest

import tfring.keras as hvd
from ranks_keras import B, data, make_model, my_shard, reference_weights, weights_equal_everywhere

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()
BACKEND = keras.backend.backend()


def as_np(value):
    return np.asarray(keras.ops.convert_to_numpy(value))


def test_value_collectives_return_the_backends_tensors():
    total = hvd.allreduce(np.array([R + 1.0], "float32"), op=hvd.Sum)
    assert keras.ops.is_tensor(total)
    np.testing.assert_array_equal(as_np(total), [N * (N + 1) / 2])
    np.testing.assert_array_equal(as_np(hvd.allgather(np.full((1, 2), R, "float32"))),
                                  np.repeat(np.arange(N, dtype="float32")[:, None], 2, 1))
    np.testing.assert_array_equal(as_np(hvd.broadcast(np.array([R], "float32"), root_rank=N - 1)), [N - 1])
    block = as_np(hvd.reducescatter(np.arange(2 * N, dtype="float32").reshape(N, 2) * (R + 1), op=hvd.Sum))
    np.testing.assert_array_equal(block, [[2 * R * N * (N + 1) / 2, (2 * R + 1) * N * (N + 1) / 2]])


def test_broadcast_global_variables_outside_fit():
    keras.utils.set_random_seed(R)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    hvd.broadcast_global_variables(0, model=model)
    assert weights_equal_everywhere(model)
    with pytest.raises(ValueError, match="model=None"):
        hvd.broadcast_global_variables(0)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_uncompiled_and_compiled_steps_match_one_process(jit_compile):
    if jit_compile and BACKEND == "torch":
        pytest.skip("Keras on torch compiles with torch.compile, which tfring.torch's collectives break up")
    steps = 3
    x, y = data(steps, N * B)
    xs, ys = my_shard(x, y, steps, B)
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse", jit_compile=jit_compile)
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    assert weights_equal_everywhere(model)
    for got, ref in zip(model.get_weights(), reference_weights(x, y, N * B, steps)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


def test_groups_train_like_ungrouped():
    steps = 2
    x, y = data(steps, N * B)
    xs, ys = my_shard(x, y, steps, B)
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=2), loss="mse")
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    for got, ref in zip(model.get_weights(), reference_weights(x, y, N * B, steps)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="groups"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=0)


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="backward_passes_per_step=0"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=0)
    with pytest.raises(ValueError, match="op="):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Max)
    with pytest.raises(ValueError, match="compression="):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), compression="int4")
    with pytest.raises(TypeError, match="optimizer must be"):
        hvd.DistributedOptimizer("sgd")


def test_local_layer_stays_local_and_the_rest_identical():
    model = make_model()
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=model.layers[0])
    model.compile(optimizer=opt, loss="mse")
    x, y = data(2, B, seed=R)  # each rank its own data
    model.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
    local = np.concatenate([w.ravel() for w in model.layers[0].get_weights()])[None].astype(np.float64)
    shared = np.concatenate([w.ravel() for w in model.layers[1].get_weights()])[None].astype(np.float64)
    local_all, shared_all = as_np(hvd.allgather(local)), as_np(hvd.allgather(shared))
    assert len({row.tobytes() for row in local_all}) == N  # the local layer differs on every rank
    assert all(np.array_equal(shared_all[0], row) for row in shared_all)


@pytest.mark.parametrize("scale", [True, False])
def test_local_layer_takes_this_ranks_own_gradient_divided_by_the_size(scale):
    # One SGD step from identical weights: the shared layer takes the global batch's gradient, the local layer this
    # rank's own gradient, divided by the size with scale_local_gradients (Horovod's rule), as it is without.
    x, y = data(1, N * B)
    xs, ys = my_shard(x, y, 1, B)
    model = make_model()
    w0 = [np.array(w) for w in model.get_weights()]
    model.compile(optimizer=hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=model.layers[0],
                                                            scale_local_gradients=scale), loss="mse")
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    own = reference_weights(xs, ys, B, 1)[:2]  # one step on this rank's batch alone
    want = [w + (o - w) / (N if scale else 1) for w, o in zip(w0[:2], own)] + reference_weights(x, y, N * B, 1)[2:]
    for got, ref in zip(model.get_weights(), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


def test_process_set_reduces_only_within_the_set():
    # {0, 1} average with each other; rank 2 is outside and applies its own gradients (ranks 3+ likewise).
    if N < 3:
        pytest.skip("a set of two ranks that is not every rank needs np >= 3")
    ps = hvd.add_process_set([0, 1])
    try:
        steps = 2
        x, y = data(steps, 2 * B)
        model = make_model()
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), process_set=ps), loss="mse")
        if ps.included():
            idx = np.concatenate([np.arange(s * 2 * B + R * B, s * 2 * B + (R + 1) * B) for s in range(steps)])
            model.fit(x[idx], y[idx], batch_size=B, epochs=1, shuffle=False, verbose=0)
            want = reference_weights(x, y, 2 * B, steps)
        else:
            model.fit(x[:steps * B], y[:steps * B], batch_size=B, epochs=1, shuffle=False, verbose=0)
            want = reference_weights(x[:steps * B], y[:steps * B], B, steps)
        for got, ref in zip(model.get_weights(), want):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)
    finally:
        hvd.remove_process_set(ps)


def test_learning_rate_schedule_callback_sets_each_epochs_rate():
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 0:
                seen.append(float(as_np(self.model.optimizer.learning_rate)))

    x, y = data(2, B, seed=R)
    model.fit(x, y, batch_size=B, epochs=3, shuffle=False, verbose=0, callbacks=[
        hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.4, multiplier=lambda e: 0.5 ** e), Record()])
    np.testing.assert_allclose(seen, [0.4, 0.2, 0.1], rtol=1e-6)


def test_metrics_callback_puts_the_jobs_numbers_in_every_ranks_logs():
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    x, y = data(12, B, seed=R)
    history = model.fit(x, y, batch_size=B, epochs=2, shuffle=False, verbose=0,
                        callbacks=[hvd.callbacks.MetricsCallback()]).history
    keys = ["tfring_wait_ms", "tfring_max_wait_ms", "tfring_busbw_gbps", "tfring_straggler", "tfring_straggler_ms"]
    for k in keys + ["tfring_step_ms"]:
        assert len(history[k]) == 2 and all(np.isfinite(history[k])), (k, history)
    assert all(v > 0 for v in history["tfring_step_ms"]), history["tfring_step_ms"]
    # Nobody, or a rank (3 ranks on 2 cores may make one persistently last: a straggler then, rightly named).
    assert all(v == -1.0 or v in range(N) for v in history["tfring_straggler"]), history["tfring_straggler"]
    # One job-wide summary: every rank logs the same numbers (the step time is each rank's own).
    everyone = hvd.allgather_object([history[k][-1] for k in keys])
    assert all(v == everyone[0] for v in everyone), everyone
    m = hvd.metrics()
    assert m["size"] == N and [r["rank"] for r in m["ranks"]] == list(range(N))
    assert all(r["total"]["collectives"] > 0 and r["total"]["bytes_reduced"] > 0 for r in m["ranks"]), m


def _bn_model(layer_cls, seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(6), layer_cls(momentum=0.5),
                             keras.layers.Dense(1)])


def test_sync_batch_norm_uses_the_global_batch_with_uneven_ranks():
    rows = [r + 2 for r in range(N)]  # rank r has r + 2 rows: ranks weighted by their rows
    rng = np.random.RandomState(3)
    everyone = [rng.randn(n, 5).astype("float32") * (r + 1) + r for r, n in enumerate(rows)]
    sync, plain = hvd.SyncBatchNormalization(momentum=0.5), keras.layers.BatchNormalization(momentum=0.5)
    out = as_np(sync(everyone[R], training=True))
    want = as_np(plain(np.concatenate(everyone), training=True))[sum(rows[:R]):sum(rows[:R + 1])]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(as_np(sync.moving_mean), as_np(plain.moving_mean), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(as_np(sync.moving_variance), as_np(plain.moving_variance), rtol=1e-4, atol=1e-5)


def test_sync_batch_norm_trains_like_batch_norm_on_the_global_batch():
    steps = 3
    rng = np.random.RandomState(5)
    x = rng.randn(steps * N * B, 4).astype("float32")
    y = rng.randn(steps * N * B, 1).astype("float32")
    xs, ys = my_shard(x, y, steps, B)
    model = _bn_model(hvd.SyncBatchNormalization)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    ref = _bn_model(keras.layers.BatchNormalization)
    ref.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    ref.fit(x, y, batch_size=N * B, epochs=1, shuffle=False, verbose=0)
    assert weights_equal_everywhere(model)
    for got, want in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)


def test_mixed_float16_skips_an_overflowed_step_on_every_rank():
    # Rank 1's batch overflows float16 (its gradients hold inf/NaN), the others' do not. Keras' own
    # LossScaleOptimizer would skip the step on rank 1 only (and its reduction: a stall); the DistributedOptimizer's
    # loss scaling skips it everywhere and halves every rank's scale, then a finite step moves every rank alike.
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1, dtype="float32")])
        opt = hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01),
                                                                           initial_scale=4.0))
        assert isinstance(opt, keras.optimizers.LossScaleOptimizer)
        assert isinstance(opt.inner_optimizer, hvd.DistributedOptimizer)
        assert isinstance(hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), keras.optimizers.LossScaleOptimizer)
        model.compile(optimizer=opt, loss="mse")
        assert model.optimizer is opt  # (compile does not wrap it again)
        before = model.get_weights()
        x = np.full((2, 4), 6e4 if R == 1 else 0.5, "float32")  # 6e4 * |w| * 4 > 65504: inf on rank 1
        model.fit(x, np.zeros((2, 1), "float32"), batch_size=2, epochs=1, verbose=0)
        for got, want in zip(model.get_weights(), before):
            np.testing.assert_array_equal(got, want)  # skipped, on every rank
        assert float(as_np(opt.dynamic_scale)) == 2.0, as_np(opt.dynamic_scale)
        model.fit(np.full((2, 4), 0.5, "float32"), np.zeros((2, 1), "float32"), batch_size=2, epochs=1, verbose=0)
        assert any(not np.array_equal(a, b) for a, b in zip(model.get_weights(), before))
        assert weights_equal_everywhere(model)
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("sharded", [False, True])
def test_mixed_float16_model_saved_and_loaded_still_skips_an_overflow_on_every_rank(tmp_path, sharded):
    # The loaded optimizer must be tfring's loss scaling again (its finiteness check agreed over the ranks), with the
    # saved scale and state: a Keras LossScaleOptimizer would skip rank 1's overflowed step there alone (a stall).
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1, dtype="float32")])
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), sharded=sharded), loss="mse")
        zeros = np.zeros((2, 1), "float32")
        model.fit(np.full((2, 4), 0.5, "float32"), zeros, batch_size=2, epochs=1, verbose=0)
        path = str(tmp_path / ("rank%d.keras" % R))
        model.save(path)
        loaded = keras.models.load_model(path)
        opt = loaded.optimizer
        assert type(opt) is type(model.optimizer) and isinstance(opt.inner_optimizer, hvd.DistributedOptimizer)
        assert opt.inner_optimizer.sharded == model.optimizer.inner_optimizer.sharded
        for a, b in zip(opt.variables, model.optimizer.variables):
            np.testing.assert_array_equal(as_np(a), as_np(b))
        before, scale = loaded.get_weights(), float(as_np(opt.dynamic_scale))
        x = np.full((2, 4), 6e4 if R == 1 else 0.5, "float32")
        loaded.fit(x, zeros, batch_size=2, epochs=1, verbose=0)
        for got, want in zip(loaded.get_weights(), before):
            np.testing.assert_array_equal(got, want)  # skipped, on every rank
        assert float(as_np(opt.dynamic_scale)) == scale / 2
        loaded.fit(np.full((2, 4), 0.5, "float32"), zeros, batch_size=2, epochs=1, verbose=0)
        assert weights_equal_everywhere(loaded)
    finally:
        keras.mixed_precision.set_global_policy("float32")
