"""jit_compile="auto" never fails because of tfring: in a real fit, a step that tfring's XLA lowering cannot serve
falls back to jit_compile=False (JitCompileFallback, before the first step); an explicit True stays. A GPU without
tfring's CUDA handlers is simulated by the devices passed in (this machine has none). The probe: a layer XLA cannot
compile (a py_function), so a step still XLA-compiled fails and a fallen-back one trains."""
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
import tfring.keras as hvd_keras
from rank_helpers import init
from tfring.keras._backend import _tf_jit_fallback as jit_fallback
from tfring.keras._backend._tf_jit_fallback import JitCompileFallback

R, N = init()
GPU_WITHOUT_LOWERING = dict(device_types={"CPU", "GPU"}, served={"CPU"})
STEPS, B = 3, 4


class NotXlaCompilable(keras.layers.Layer):
    def call(self, x):
        zero = tf.py_function(lambda: np.float32(0), [], tf.float32)
        zero.set_shape(())
        return x + zero

    def compute_output_shape(self, input_shape):
        return input_shape


def make(probe):
    keras.utils.set_random_seed(0)
    layers = [keras.Input((5,)), keras.layers.Dense(8, activation="tanh")]
    return keras.Sequential(layers + ([NotXlaCompilable()] if probe else []) + [keras.layers.Dense(1)])


def data():
    rng = np.random.RandomState(3)
    x, y = rng.randn(STEPS * N * B, 5).astype("float32"), rng.randn(STEPS * N * B, 1).astype("float32")
    idx = np.concatenate([np.arange(s * N * B + R * B, s * N * B + (R + 1) * B) for s in range(STEPS)])
    return x, y, idx


def fit(model, jit_compile, fallback):
    x, y, idx = data()
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse",
                  jit_compile=jit_compile)
    model.fit(x[idx], y[idx], batch_size=B, epochs=2, shuffle=False, verbose=0,
              callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0), fallback])


def assert_same_on_every_rank_and_equal_to_one_process(model, probe):
    x, y, _ = data()
    ref = make(probe)
    ref.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=False)
    ref.fit(x, y, batch_size=N * B, epochs=2, shuffle=False, verbose=0)
    for w, e in zip(model.get_weights(), ref.get_weights()):
        gathered = hvd.allgather(tf.constant(w[None]), name="fallback_weights").numpy()
        assert all(np.array_equal(gathered[0], g) for g in gathered)
        np.testing.assert_allclose(w, e, rtol=1e-4, atol=1e-6)


def test_auto_resolved_to_xla_on_an_unserved_gpu_falls_back_with_one_warning(monkeypatch):
    monkeypatch.setattr(jit_fallback, "_warned", False)
    model = make(probe=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(model, True, JitCompileFallback(**GPU_WITHOUT_LOWERING))  # True: what Keras resolves "auto" to there
        fit(model, True, JitCompileFallback(**GPU_WITHOUT_LOWERING))  # a second fit: no second warning
    ours = [w for w in caught if "tfring: jit_compile='auto'" in str(w.message)]
    assert len(ours) == 1 and "GPU" in str(ours[0].message), [str(w.message) for w in caught]
    assert model.jit_compile is False
    model2 = make(probe=True)
    fit(model2, True, JitCompileFallback(**GPU_WITHOUT_LOWERING))
    assert_same_on_every_rank_and_equal_to_one_process(model2, probe=True)


def test_the_broadcast_callback_falls_back_by_itself_on_an_unserved_gpu(monkeypatch):
    # The Horovod recipe as written (no JitCompileFallback): BroadcastGlobalVariablesCallback applies the fallback.
    monkeypatch.setattr(jit_fallback, "present_device_types", lambda: {"CPU", "GPU"})
    monkeypatch.setattr(jit_fallback, "served_device_types", lambda: {"CPU"})
    model = make(probe=True)
    fit(model, True, keras.callbacks.Callback())
    assert model.jit_compile is False
    assert_same_on_every_rank_and_equal_to_one_process(model, probe=True)
    monkeypatch.setattr(jit_fallback, "served_device_types", lambda: {"CPU", "GPU"})  # a served GPU keeps XLA
    model = make(probe=False)
    fit(model, True, keras.callbacks.Callback())
    assert model.jit_compile is True


def test_explicit_true_stays_as_asked():
    model = make(probe=True)
    with pytest.raises(Exception, match="py_function|EagerPyFunc|PyFunc|compil"):
        fit(model, True, JitCompileFallback(requested=True, **GPU_WITHOUT_LOWERING))
    assert model.jit_compile is True


def test_a_served_gpu_keeps_xla():
    model = make(probe=False)
    fit(model, True, JitCompileFallback(device_types={"CPU", "GPU"}, served={"CPU", "GPU"}))
    assert model.jit_compile is True
    assert_same_on_every_rank_and_equal_to_one_process(model, probe=False)


def test_real_auto_on_this_cpu_machine():
    model = make(probe=False)
    fit(model, "auto", JitCompileFallback())  # this process's devices and build: Keras resolves False on CPU
    assert model.jit_compile is False
    assert_same_on_every_rank_and_equal_to_one_process(model, probe=False)
