"""Builds and runs the core's C++ unit tests (no MPI, no TensorFlow: ranks are threads)."""
import glob
import os
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow  # runs g++ (~20 s)

CORE = ["types", "message", "env", "logging", "tensor_queue", "response_cache", "response_builder", "coordinator",
        "controller",
        "fusion", "timeline", "completion_queue", "autotune", "labels", "monitor", "block_cache", "names"]


def test_core_unit_tests(tmp_path):
    binary = str(tmp_path / "cc_tests")
    sources = sorted(glob.glob(os.path.join(ROOT, "tests/cc/*.cc")))
    sources += [os.path.join(ROOT, "tfring/cc/common/%s.cc" % s) for s in CORE]
    sources += [os.path.join(ROOT, "tfring/cc/common/ops/%s.cc" % s) for s in ("scale", "layout", "staging")]
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-pthread", "-o", binary] + sources, check=True)
    proc = subprocess.run([binary], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout
    assert "FAIL" not in proc.stdout
