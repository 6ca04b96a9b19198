"""Each example runs at np=2 through tfringrun, as a user would run it."""
import os
import subprocess
import sys

from conftest import ROOT, rank_env


def tfringrun(args, timeout=600):
    cmd = [sys.executable, "-m", "tfring.runner"] + args
    return subprocess.run(cmd, cwd=ROOT, env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def test_keras_digits_reaches_95_percent_at_np2():
    proc = tfringrun(["-np", "2", "python", "examples/keras_digits.py", "--epochs", "12", "--target-accuracy",
                      "0.95"])
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "[0]<stdout>:validation accuracy" in proc.stdout
