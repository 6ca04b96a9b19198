"""BestModelCheckpoint writes a temp file and renames it: killing the process during a save leaves the previous
checkpoint loadable (never a half-written file at the checkpoint path)."""
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, rank_env

TRAIN = textwrap.dedent("""
    import os, sys
    import numpy as np, keras
    import tfring.keras as hvd
    hvd.init()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(1024), keras.layers.Dense(1024),
                              keras.layers.Dense(1)])   # ~1.1 M weights: each save takes a while
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(1e-4)), loss="mse")
    x, y = np.random.randn(64, 64), np.random.randn(64, 1)

    class Saving(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            print("EPOCH", epoch, flush=True)

    # monitor=loss with mode=max... every epoch is an "improvement" if we track -inf: use 'epoch_marker'.
    class Always(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["marker"] = float(epoch)

    model.fit(x, y, epochs=10000, verbose=0, callbacks=[Always(), hvd.callbacks.BestModelCheckpoint(
        os.path.join(sys.argv[1], "best.keras"), monitor="marker", mode="max"), Saving()])
""")


@pytest.mark.parametrize("delay", [0.13, 0.29, 0.41])
def test_kill_during_save_leaves_previous_checkpoint_loadable(tmp_path, delay):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen([sys.executable, str(script), str(ckpt)], cwd=ROOT, env=rank_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    epochs = 0
    while epochs < 3:  # a few saves done: the next ones are in progress when we kill
        line = proc.stdout.readline()
        assert line, "training ended early"
        epochs += line.startswith("EPOCH")
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    best = ckpt / "best.keras"
    assert best.exists()
    load = subprocess.run([sys.executable, "-c", "import keras, tfring.keras as hvd, sys; "
                           "m = hvd.load_model(sys.argv[1]); print('LOADED', len(m.get_weights()))", str(best)],
                          cwd=ROOT, env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    assert "LOADED 6" in load.stdout, load.stdout[-2000:]
