"""The sharded Keras DistributedOptimizer (ZeRO, sharded=1|2) on real ranks, on the backend Keras runs: it trains to
the single-process weights (identical on every rank) while each rank's optimizer state holds only its shard
(uneven: 57 weights over 2 ranks), clips by the whole gradient's norm, accumulates backward passes (stage 2: only
its shard of the gradients), shards over a process set, checkpoints in
the unsharded layout (so a state saved at one size loads at another, sharded or not), and refuses by name what it
cannot do."""
import keras
import numpy as np
import pytest

import tfring.keras as hvd
from tfring.keras import _sharding
from tfring.keras._backend import glue
from ranks_keras import B, data, make_model, my_shard, reference_weights, weights_equal_everywhere

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()
WEIGHTS = 5 * 8 + 8 + 8 + 1  # make_model()'s
VARIABLES = [5 * 8, 8, 8, 1]
# JAX shards each variable on its own, cut like reducescatter's rows (np=3: the 1-weight bias is rank 0's alone,
# the others hold an empty shard of it); the other backends lay the variables end to end in padded buckets.
PER_VARIABLE = getattr(glue(), "shard_per_variable", False)


def shard_lengths(rank, size, bucket_bytes=None):
    """This rank's shard lengths, one per bucket (per variable on JAX)."""
    if PER_VARIABLE:
        return [n // size + (rank < n % size) for n in VARIABLES]
    lengths = [16] * (WEIGHTS // 16) + [WEIGHTS % 16] if bucket_bytes else [WEIGHTS]
    return [-(-n // size) for n in lengths]


def fit(optimizer, x, y, steps, per_rank=B, process_set=None):
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer, sharded=True, process_set=process_set), loss="mse")
    model.fit(x, y, batch_size=per_rank, epochs=2, shuffle=False, verbose=0, steps_per_epoch=steps)
    return model


def state(optimizer):
    store = {}
    optimizer.save_own_variables(store)
    return [np.asarray(store[str(i)]) for i in range(len(store))]


@pytest.mark.parametrize("clip,bucket_bytes", [(None, None), (0.05, 64)])
def test_sharded_adam_trains_to_the_single_process_weights_keeping_only_its_shard(clip, bucket_bytes, monkeypatch):
    # 64-byte buckets: 16 weights each, variables spanning buckets, every bucket padded at np=3
    if bucket_bytes:
        monkeypatch.setattr(_sharding, "BUCKET_BYTES", bucket_bytes)
    steps = 3
    x, y = data(steps, N * B)
    xs, ys = my_shard(x, y, steps, B)
    model = fit(keras.optimizers.Adam(0.01, global_clipnorm=clip), xs, ys, steps)
    want = reference_weights(x, y, N * B, steps, epochs=2, optimizer=keras.optimizers.Adam(0.01, global_clipnorm=clip))
    for got, ref in zip(model.get_weights(), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)
    assert weights_equal_everywhere(model)
    inner = model.optimizer.inner_optimizer
    shards = shard_lengths(R, N, bucket_bytes) * 2  # Adam's m and v of each bucket
    assert sorted(int(np.prod(v.shape)) for v in inner.variables if len(v.shape)) == sorted(shards)


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX's jitted step: buffer donation")
def test_the_jitted_sharded_step_writes_every_state_buffer_in_place():
    # Keras donates the step's state; every output must reuse its input's buffer, the weight-shard copies too (they
    # did not: assigned whole, their input went unused and each step allocated them afresh, above the unsharded
    # optimizer's peak memory). Read off XLA's compiled step (Keras' own state layout, a private API).
    import jax
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128)])  # shards of ~11 KB at np=3
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), sharded=True), loss="mse")
    x, y = np.ones((B, 64), "float32"), np.zeros((B, 128), "float32")
    model.fit(x, y, batch_size=B, epochs=1, verbose=0)
    state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True, optimizer_variables=True,
                                 metrics_variables=True)
    memory = jax.jit(model.train_step, donate_argnums=0).lower(state, (x, y, None)).compile().memory_analysis()
    shards = 4 * (64 * 128 // N)  # the kernel's weight shard: in the output, aliased or not
    # What is not aliased: the logs (the loss) and XLA's tuple tables, a few hundred bytes.
    assert memory.output_size_in_bytes - memory.alias_size_in_bytes < shards // 4, (
        memory.output_size_in_bytes, memory.alias_size_in_bytes, shards)


def test_the_checkpoint_is_the_unsharded_layout_and_loads_at_another_size():
    steps = 2
    x, y = data(steps, N * B)
    xs, ys = my_shard(x, y, steps, B)
    sharded = fit(keras.optimizers.Adam(0.01), xs, ys, steps)
    plain = make_model()
    plain.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
    plain.fit(xs, ys, batch_size=B, epochs=2, shuffle=False, verbose=0, steps_per_epoch=steps)
    saved = state(sharded.optimizer)
    for got, ref in zip(saved, state(plain.optimizer)):  # what an unsharded run of the same steps holds
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-7)
    # Loaded by a sharded optimizer over 2 ranks (np=3: a set that is not every rank) and saved again: the same.
    ps = hvd.add_process_set([0, 1]) if N > 2 else hvd.global_process_set  # (a set of every rank exists)
    try:
        other = make_model()  # on every rank: Keras numbers models per process, and gradients are named after them
        if ps.included():
            other.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), sharded=2,
                                                             process_set=ps), loss="mse")
            other.optimizer.build(other.trainable_variables)
            other.optimizer.load_own_variables({str(i): v for i, v in enumerate(saved)})
            moments = [v for v in other.optimizer.inner_optimizer.variables if len(v.shape)]
            assert sorted(int(v.shape[0]) for v in moments) == sorted(shard_lengths(ps.rank(), 2) * 2)
            for got, ref in zip(state(other.optimizer), saved):
                np.testing.assert_array_equal(got, ref)
    finally:
        if N > 2:
            hvd.remove_process_set(ps)


@pytest.mark.parametrize("stage", [1, 2])
def test_backward_passes_end_as_the_unsharded_optimizer_and_stage_2_accumulates_only_its_shard(stage):
    # 2 passes per update over 3 steps x 2 epochs: stage 1 keeps whole local gradients between passes and
    # reduce-scatters their total; stage 2 reduce-scatters each pass and keeps the shards' sum.
    steps = 3
    x, y = data(steps, N * B)
    xs, ys = my_shard(x, y, steps, B)
    models = []
    for sharded in (stage, False):
        model = make_model()
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), sharded=sharded,
                                                         backward_passes_per_step=2), loss="mse")
        model.fit(xs, ys, batch_size=B, epochs=2, shuffle=False, verbose=0, steps_per_epoch=steps)
        models.append(model)
    for got, ref in zip(models[0].get_weights(), models[1].get_weights()):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)
    assert any(not np.allclose(a, b) for a, b in zip(models[0].get_weights(), make_model().get_weights()))
    assert weights_equal_everywhere(models[0])
    for got, ref in zip(state(models[0].optimizer), state(models[1].optimizer)):  # the unsharded layout
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-7)
    accumulators = models[0].optimizer._accumulators
    if stage == 2:
        assert [int(np.prod(a.shape)) for a in accumulators] == shard_lengths(R, N)
    else:
        assert [tuple(a.shape) for a in accumulators] == [tuple(v.shape) for v in models[0].trainable_variables]


def test_save_and_load_model_round_trip_on_every_rank(tmp_path):
    steps = 2
    x, y = data(steps, N * B)
    xs, ys = my_shard(x, y, steps, B)
    model = fit(keras.optimizers.Adam(0.01), xs, ys, steps)
    path = str(tmp_path / ("rank%d.keras" % R))  # every rank saves: the state is gathered (rank 0's file is the one)
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.optimizer, hvd.DistributedOptimizer) and loaded.optimizer.sharded == 1
    for got, ref in zip(state(loaded.optimizer), state(model.optimizer)):
        np.testing.assert_array_equal(got, ref)


def test_what_sharding_cannot_do_is_refused_by_name():
    adam = keras.optimizers.Adam(0.01)
    with pytest.raises(ValueError, match="sharded=3 must be False, True, 1 or 2"):
        hvd.DistributedOptimizer(adam, sharded=3)
    with pytest.raises(ValueError, match="clipnorm=1.0 clips each variable"):
        hvd.DistributedOptimizer(keras.optimizers.Adam(0.01, clipnorm=1.0), sharded=True)
    with pytest.raises(ValueError, match="Adafactor updates by per-variable shapes"):
        hvd.DistributedOptimizer(keras.optimizers.Adafactor(), sharded=True)
    with pytest.raises(ValueError, match="groups=2 does not combine"):
        hvd.DistributedOptimizer(adam, sharded=True, groups=2)
    opt = hvd.DistributedOptimizer(adam, sharded=True)
    with pytest.raises(ValueError, match="local variables and sharded=1"):
        opt.register_local_var(make_model().trainable_variables[0])
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), sharded=2), loss="mse")
    # Elastic jobs take a sharded optimizer (tests/elastic/test_keras_elastic.py): its state travels in the unsharded
    # layout, apart from the model's variables, which alone are broadcast by position.
    state = hvd.elastic.KerasState(model, batch=0)
    assert [id(v) for v in state._tracked()] == [id(v) for v in model.variables]
    scaled = hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01)), sharded=True)
    state = hvd.elastic.KerasState(model, optimizer=scaled, batch=0)  # loss scaling outside: its variables go too
    sharded = {id(v) for v in scaled.inner_optimizer.variables}
    assert [id(v) for v in state._tracked()] == [id(v) for v in model.variables] + [
        id(v) for v in scaled.variables if id(v) not in sharded]
