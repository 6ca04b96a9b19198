"""Builds and runs the core's C++ unit tests (no MPI, no TensorFlow: ranks are threads)."""
import glob
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ROOT, ccache

pytestmark = pytest.mark.slow  # runs g++ (~20 s; a few with ccache's objects from an earlier run)

CORE = ["types", "message", "env", "logging", "tensor_queue", "response_cache", "response_builder", "coordinator",
        "controller",
        "fusion", "timeline", "completion_queue", "autotune", "labels", "monitor", "block_cache", "names"]


def test_core_unit_tests(tmp_path):
    binary = str(tmp_path / "cc_tests")
    # Paths relative to the tree (CCACHE_BASEDIR): another clone reuses the objects too.
    sources = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "tests/cc/*.cc")))
    sources += ["tfring/cc/common/%s.cc" % s for s in CORE]
    sources += ["tfring/cc/common/ops/%s.cc" % s for s in ("scale", "layout", "staging")]
    launcher = [ccache()] if ccache() else []
    env = dict(os.environ, CCACHE_BASEDIR=ROOT)

    def compile_one(i_src):  # one object per source: what ccache can reuse
        obj = str(tmp_path / ("%d.o" % i_src[0]))
        subprocess.run(launcher + ["g++", "-std=c++17", "-O1", "-Wall", "-pthread", "-c", i_src[1], "-o", obj],
                       check=True, cwd=ROOT, env=env)
        return obj

    with ThreadPoolExecutor(2) as pool:
        objects = list(pool.map(compile_one, enumerate(sources)))
    subprocess.run(["g++", "-pthread", "-o", binary] + objects, check=True)
    proc = subprocess.run([binary], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout
    assert "FAIL" not in proc.stdout
