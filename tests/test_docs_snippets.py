"""docs/migrating.md's code runs as printed: its Keras 3 blocks (the migrated Horovod MNIST example and the
custom-loop snippet) on 2 ranks, and its tf_keras block where tf_keras is installed."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, mpirun_command, rank_env

pytestmark = pytest.mark.slow  # launches real ranks or jobs

DOC = os.path.join(ROOT, "docs", "migrating.md")


def python_blocks():
    """([(offset, code) of each ```python block of migrating.md, in order], the whole text)."""
    with open(DOC) as f:
        text = f.read()
    return [(m.start(), m.group(1)) for m in re.finditer(r"```python\n(.*?)```", text, re.S)], text


def block_after(marker):
    blocks, text = python_blocks()
    start = text.index(marker)
    return next(code for pos, code in blocks if pos > start)


def block_with(needle):
    blocks, _ = python_blocks()
    return next(code for _, code in blocks if needle in code)


def run_two_ranks(script, cwd, extra_env=None, timeout=300):
    env = rank_env()
    env.update(extra_env or {})
    cmd = mpirun_command(2) + [sys.executable, script]
    return subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


# Runs the custom-loop snippet, then the migrated example's train() for 3 short epochs on random MNIST-shaped data
# (the only line not exercised is the MNIST download itself).
DRIVER = r'''
import runpy, sys
import numpy as np
import keras

def load_data(path="mnist.npz"):
    rng = np.random.RandomState(0)
    x, y = rng.randint(0, 256, (256, 28, 28)).astype("uint8"), rng.randint(0, 10, 256).astype("uint8")
    return (x, y), (x[:32], y[:32])

keras.datasets.mnist.load_data = load_data
runpy.run_path("custom_loop.py")
history = runpy.run_path("migrated.py")["train"](epochs=3, steps_per_epoch=8)
import tfring
print("DOCS_OK rank %d epochs %d" % (tfring.rank(), len(history["loss"])), flush=True)
'''


def test_migrated_mnist_example_and_custom_loop_run_at_np2(tmp_path):
    (tmp_path / "migrated.py").write_text(block_after("<!-- migrated-example -->"))
    (tmp_path / "custom_loop.py").write_text(block_with("hvd.broadcast_variables(opt.variables, root_rank=0)"))
    (tmp_path / "driver.py").write_text(DRIVER)
    proc = run_two_ranks("driver.py", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-5000:]
    for rank in (0, 1):
        assert "DOCS_OK rank %d epochs 3" % rank in proc.stdout, proc.stdout[-5000:]
    assert "finished warmup" in proc.stdout  # LearningRateWarmupCallback(verbose=1) on rank 0
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*.keras")) == [
        "checkpoint-1.keras", "checkpoint-2.keras", "checkpoint-3.keras"]


@pytest.mark.skipif(importlib.util.find_spec("tf_keras") is None, reason="tf_keras is not installed")
def test_tf_keras_snippet_runs_at_np2(tmp_path):
    (tmp_path / "keras2_script.py").write_text(block_with("TF_USE_LEGACY_KERAS=1"))
    proc = run_two_ranks("keras2_script.py", cwd=str(tmp_path), extra_env={"TF_USE_LEGACY_KERAS": "1"})
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert (tmp_path / "keras2_model.h5").exists()
