"""Each example runs at np=2 through tfringrun, as a user would run it."""
import subprocess
import sys

import pytest

from conftest import ROOT, rank_env

pytestmark = pytest.mark.slow  # launches real ranks or jobs


def tfringrun(args, timeout=600):
    cmd = [sys.executable, "-m", "tfring.runner"] + args
    return subprocess.run(cmd, cwd=ROOT, env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def test_keras_digits_reaches_95_percent_at_np2():
    proc = tfringrun(["-np", "2", "python", "examples/keras_digits.py", "--epochs", "12", "--target-accuracy",
                      "0.95"])
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "[0]<stdout>:validation accuracy" in proc.stdout


def test_tf2_custom_loop_at_np2():
    proc = tfringrun(["-np", "2", "python", "examples/tf2_custom_loop.py", "--steps", "200"])
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "weights identical on 2 ranks" in proc.stdout


def test_synthetic_benchmark_few_steps_at_np2():
    # MobileNet rather than the default ResNet-50: the same code path, a third of the layers to build and trace.
    proc = tfringrun(["-np", "2", "python", "examples/keras_synthetic_benchmark.py", "--model", "MobileNet",
                      "--batch-size", "2", "--image-size", "64", "--num-warmup-batches", "1",
                      "--num-batches-per-iter", "1", "--num-iters", "2"])
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "Total img/sec on 2 rank(s)" in proc.stdout


def test_horovod_keras_recipe_runs_with_only_the_import_changed(tmp_path):
    proc = tfringrun(["-np", "2", "python", "tests/drop_in/horovod_keras_recipe.py", str(tmp_path)])
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "DROP_IN_OK ['checkpoint-1.keras', 'checkpoint-2.keras', 'checkpoint-3.keras']" in proc.stdout
    assert "Epoch 3" in proc.stdout


def test_torch_digits_reaches_95_percent_at_np2():
    pytest.importorskip("torch")
    proc = tfringrun(["-np", "2", "python", "examples/torch_digits.py", "--epochs", "12", "--target-accuracy", "0.95"])
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "[0]<stdout>:validation accuracy" in proc.stdout


def _python(args, timeout=600):
    return subprocess.run([sys.executable] + args, cwd=ROOT, env=rank_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


@pytest.mark.parametrize("example, engine", [("spark_elastic_digits.py", "pyspark"), ("ray_elastic_digits.py", "ray")])
def test_elastic_engine_examples_grow_to_three_ranks(example, engine):
    # Each starts below its maximum (2 Spark tasks of 3; Ray: as many actors as registered in time) and reaches
    # 3 ranks: the example's own growth path, then its accuracy.
    pytest.importorskip(engine)
    pytest.importorskip("torch")
    proc = _python(["examples/" + example, "--epochs", "5", "--target-accuracy", "0.9"])
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "on 3 ranks" in proc.stdout.splitlines()[-1], proc.stdout[-3000:]
