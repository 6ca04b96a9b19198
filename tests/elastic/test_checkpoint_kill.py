"""BestModelCheckpoint writes a temp file and renames it: killing the process during a save leaves the previous
checkpoint loadable (never a half-written file at the checkpoint path). The kill is proven to land inside a save:
the process is frozen (SIGSTOP) until a frozen moment shows the save's temp file, then killed."""
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, rank_env

pytestmark = pytest.mark.slow  # launches real ranks or jobs

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


def epochs_logged(log):
    return log.read_text(errors="replace").count("EPOCH")


def wait_stopped(pid):
    deadline = time.time() + 10
    while time.time() < deadline:
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return
        time.sleep(0.005)
    raise AssertionError("pid %d did not stop" % pid)


@pytest.mark.parametrize("delay", [0.13, 0.29, 0.41])
def test_kill_during_save_leaves_previous_checkpoint_loadable(tmp_path, delay):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    ckpt, log = tmp_path / "ckpt", tmp_path / "train.log"
    with open(log, "w") as out:  # a file, not a pipe: a stopped reader can never block the writer
        proc = subprocess.Popen([sys.executable, str(script), str(ckpt)], cwd=ROOT, env=rank_env(), stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 300
        while epochs_logged(log) < 3:  # a few saves done: best.keras exists, the next saves are under way
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        # Freeze the process after a delay and look: a temp file means it froze inside a save (the rename has not
        # happened). If not, the delay fell between saves: resume and try another delay. The SIGKILL is sent while
        # frozen, so it lands exactly where we looked.
        temps = []
        for attempt in range(200):
            time.sleep((delay + 0.037 * attempt) % 0.5)
            proc.send_signal(signal.SIGSTOP)
            wait_stopped(proc.pid)  # every thread frozen before we look
            temps = list(ckpt.glob(".tmp-*best.keras"))
            if temps:
                break
            proc.send_signal(signal.SIGCONT)
            assert proc.poll() is None, log.read_text()[-3000:]
        assert temps, "no stop landed during a save in 200 tries: %s" % sorted(p.name for p in ckpt.iterdir())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert all(t.exists() for t in temps)  # the interrupted save, left half-written beside the checkpoint
    best = ckpt / "best.keras"
    assert best.exists()
    load = subprocess.run([sys.executable, "-c", "import keras, tfring.keras as hvd, sys; "
                           "m = hvd.load_model(sys.argv[1]); print('LOADED', len(m.get_weights()))", str(best)],
                          cwd=ROOT, env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    assert "LOADED 6" in load.stdout, load.stdout[-2000:]
