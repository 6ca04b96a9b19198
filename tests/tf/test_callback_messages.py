"""Size 1: tfring's Keras callbacks print through Keras' messaging, so disabling Keras' interactive logging moves
their messages from stdout to absl logging (as it does for Keras' own callbacks); tf_keras alike."""
import importlib.util
import logging
import subprocess
import sys

import keras
import numpy as np
import pytest

import tfring.keras as hvd
from conftest import rank_env

MESSAGES = ["learning rate set to", "finished warmup", "improved to"]


@pytest.fixture(scope="module", autouse=True)
def initialized():
    hvd.init()
    yield


@pytest.fixture
def interactive():
    yield
    keras.config.enable_interactive_logging()


def fit_with_verbose_callbacks(tmp_path):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    callbacks = [
        hvd.callbacks.LearningRateScheduleCallback(0.01, 0.5, start_epoch=0, end_epoch=1, verbose=1),
        hvd.callbacks.LearningRateWarmupCallback(0.01, warmup_epochs=1, verbose=1),
        hvd.callbacks.BestModelCheckpoint(str(tmp_path / "best.keras"), monitor="loss", verbose=1),
    ]
    x, y = np.random.RandomState(0).randn(8, 3), np.random.RandomState(1).randn(8, 1)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=callbacks)


def test_messages_go_to_stdout_with_interactive_logging(tmp_path, capsys, interactive):
    keras.config.enable_interactive_logging()
    fit_with_verbose_callbacks(tmp_path)
    out = capsys.readouterr().out
    for message in MESSAGES:
        assert message in out


def test_disable_interactive_logging_silences_them(tmp_path, capsys, caplog, interactive):
    keras.config.disable_interactive_logging()
    with caplog.at_level(logging.INFO, logger="absl"):
        fit_with_verbose_callbacks(tmp_path)
    out = capsys.readouterr().out
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for message in MESSAGES:
        assert message not in out  # a print() would still land on stdout
        assert message in logged  # Keras sends them to absl logging instead


TF_KERAS_SCRIPT = r'''
import numpy as np
import tf_keras
import tfring.keras as hvd

hvd.init()
model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.01)), loss="mse")
for interactive in (True, False):
    (tf_keras.utils.enable_interactive_logging if interactive else tf_keras.utils.disable_interactive_logging)()
    callback = hvd.callbacks.LearningRateWarmupCallback(0.01, warmup_epochs=1, verbose=1)
    model.fit(np.zeros((8, 3)), np.zeros((8, 1)), batch_size=4, epochs=1, verbose=0, callbacks=[callback])
    print("PHASE_DONE", flush=True)
'''


@pytest.mark.skipif(importlib.util.find_spec("tf_keras") is None, reason="tf_keras is not installed")
def test_tf_keras_callbacks_follow_tf_keras_interactive_logging():
    # rank_env: PYTHONSAFEPATH, so `-c` never imports the source tree's tfring/ (no library) from the cwd.
    env = dict(rank_env(), TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", TF_KERAS_SCRIPT], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]
    interactive, silenced, _ = proc.stdout.split("PHASE_DONE")
    assert "finished warmup" in interactive, proc.stdout
    assert "finished warmup" not in silenced, proc.stdout
