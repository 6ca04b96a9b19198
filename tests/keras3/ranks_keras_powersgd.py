"""The Keras DistributedOptimizer with compression=Compression.powersgd(...) on real ranks, on the backend Keras runs:
model.fit ends with the weights of a float64 numpy simulation of every rank's PowerSGD (P = avg(M Q), orthonormal P,
Q = avg(M^T P), error = M - P Q^T; the warm-up step uncompressed), identical on every rank; Q and the error are
optimizer variables of the compressed kernel only; the collectives carry only the factors and the small tensors;
the settings survive get_config; what does not combine is refused by name."""
import keras
import numpy as np
import pytest

import tfring.keras as hvd
from powersgd_reference import B, IN, LR, OUT, STEPS, batch, initial_weights, simulated

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()


def fit(compression):
    model = keras.Sequential([keras.Input((IN,)), keras.layers.Dense(OUT)])
    model.set_weights(initial_weights())
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR), compression=compression), loss="mse")
    xs, ys = zip(*[batch(step, R) for step in range(STEPS)])
    model.fit(np.concatenate(xs), np.concatenate(ys), batch_size=B, epochs=1, shuffle=False, verbose=0)
    return model


def test_fit_matches_a_simulation_of_every_rank():
    config = hvd.Compression.powersgd(rank=2, warmup_steps=1)
    model = fit(config)
    for got, want in zip(model.get_weights(), simulated(config, N)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg="rank %d" % R)
    for w in model.get_weights():
        assert all(np.array_equal(w, other) for other in hvd.allgather_object(w))
    shapes = sorted(tuple(v.shape) for v in model.optimizer.variables if "powersgd" in v.path)
    assert shapes == [(), (64, 96), (96, 2)], shapes
    # An elastic sync: every rank gets rank 0's Q, and the error (each rank's own residual) starts again from zero.
    psgd = model.optimizer._powersgd
    assert np.abs(keras.ops.convert_to_numpy(psgd.errors[0].value)).max() > 0
    hvd.elastic.KerasState(model).sync()
    assert not np.any(keras.ops.convert_to_numpy(psgd.errors[0].value))
    q = keras.ops.convert_to_numpy(psgd.qs[0].value)
    assert all(np.array_equal(q, other) for other in hvd.allgather_object(q))


def test_only_the_factors_and_small_tensors_travel():
    sent = set()
    model = keras.Sequential([keras.Input((IN,)), keras.layers.Dense(OUT)])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR), compression=hvd.Compression.powersgd(warmup_steps=1))
    model.compile(optimizer=opt, loss="mse")
    opt.build(model.trainable_variables)
    real = opt._powersgd._grouped_allreduce

    def counting(tensors, name=None, **kwargs):
        sent.add((name, sum(int(np.prod(t.shape)) for t in tensors)))
        return real(tensors, name=name, **kwargs)
    opt._powersgd._grouped_allreduce = counting
    x, y = batch(0, R)
    model.fit(np.concatenate([x, x]), np.concatenate([y, y]), batch_size=B, epochs=1, shuffle=False, verbose=0)
    assert sent == {("powersgd.warmup", IN * OUT + OUT), ("powersgd.P", IN * 1 + OUT), ("powersgd.Q", OUT * 1)}, sent


def test_settings_survive_get_config_and_what_does_not_combine_is_refused():
    config = hvd.Compression.powersgd(rank=3, warmup_steps=5, min_size=100, seed=2)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), compression=config)
    again = hvd.DistributedOptimizer.from_config(opt.get_config())
    assert again.compression == config
    for kwargs, what in ((dict(sharded=True), "sharded=True"), (dict(groups=2), "groups=2"),
                         (dict(backward_passes_per_step=2), "backward_passes_per_step=2")):
        with pytest.raises(ValueError, match="does not combine with %s" % what):
            hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), compression=config, **kwargs)
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    with pytest.raises(ValueError, match="local variables and compression=PowerSGD"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), compression=config).register_local_var(layer.kernel)
