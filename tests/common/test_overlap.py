"""tfring.common.overlap: TFRING_OVERLAP_GRADIENTS 1 / 0 decide alone; unset, empty or auto read the build and the
job-wide CPU count agreed at init (tests/tf/ranks_init_agreement.py checks that on real ranks); a bad value is
named."""
import os
import subprocess
import sys

import pytest

from tfring.common import overlap


@pytest.mark.parametrize("value, want", [(None, "auto"), ("", "auto"), (" AUTO ", "auto"), ("1", "1"),
                                         (" 0 ", "0")])
def test_setting(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv(overlap.ENV, raising=False)
    else:
        monkeypatch.setenv(overlap.ENV, value)
    assert overlap.setting() == want


@pytest.mark.parametrize("value, want", [("1", True), ("0", False)])
def test_explicit_value_decides_before_init(monkeypatch, value, want):
    monkeypatch.setenv(overlap.ENV, value)
    assert overlap.overlap_gradients() is want  # no topology asked: tfring is not initialized here


@pytest.mark.parametrize("cores, gpu_build, want", [(0.5, False, False), (1.0, False, False), (1.999, False, False),
                                                    (2.0, False, True), (1.0, True, True)])
def test_auto_follows_the_agreed_cores_and_the_build(monkeypatch, cores, gpu_build, want):
    monkeypatch.delenv(overlap.ENV, raising=False)
    monkeypatch.delenv("TFRING_ELASTIC", raising=False)
    monkeypatch.setattr(overlap.topology, "min_cores_per_rank", lambda: cores)
    monkeypatch.setattr(overlap.topology, "nccl_built", lambda: gpu_build)
    assert overlap.overlap_gradients() is want


def test_auto_in_an_elastic_job_is_horovods_way(monkeypatch):
    # Membership changes move the agreed count: ranks joining later must choose as the ranks already running.
    monkeypatch.delenv(overlap.ENV, raising=False)
    monkeypatch.setenv("TFRING_ELASTIC", "1")
    monkeypatch.setattr(overlap.topology, "min_cores_per_rank", lambda: 0.5)
    monkeypatch.setattr(overlap.topology, "nccl_built", lambda: False)
    assert overlap.overlap_gradients() is True
    monkeypatch.setenv(overlap.ENV, "0")
    assert overlap.overlap_gradients() is False


def test_auto_before_init_says_so(monkeypatch):
    # In a child process: this pytest process may have initialized tfring already (size-1 tests), in any order.
    env = dict(os.environ, **{overlap.ENV: "auto"})
    env.pop("TFRING_ELASTIC", None)
    code = ("from tfring.common import overlap\ntry:\n    overlap.overlap_gradients()\nexcept ValueError as e:\n"
            "    print('raised:', e)")
    out = subprocess.run([sys.executable, "-P", "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=60).stdout
    assert "raised:" in out and "not been initialized" in out, out


@pytest.mark.parametrize("value", ["sometimes", "2", "yes"])
def test_bad_value_is_named(monkeypatch, value):
    monkeypatch.setenv(overlap.ENV, value)
    with pytest.raises(ValueError, match="TFRING_OVERLAP_GRADIENTS=%r" % value):
        overlap.overlap_gradients()
