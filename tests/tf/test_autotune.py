"""TFRING_AUTOTUNE=1 at np=2 and 3: rank 0 tunes while real collectives run; every rank checks its results, all
ranks apply each setting, and the CSV log shows the search and the chosen setting."""
import csv

import pytest

from conftest import run_rank_pytest, run_ranks

pytestmark = pytest.mark.slow  # real ranks under mpirun

THRESHOLDS = [1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20]


@pytest.mark.parametrize("np_", [2, 3])
def test_autotune_settles_consistently(tmp_path, np_):
    log = tmp_path / "autotune.csv"
    proc = run_rank_pytest(np_, "tests/tf/autotune_job.py", timeout=600, extra_env={
        "TFRING_AUTOTUNE": "1", "TFRING_AUTOTUNE_LOG": str(log), "TFRING_AUTOTUNE_SAMPLE_SECONDS": "0.05",
        "TFRING_AUTOTUNE_WARMUP_SAMPLES": "1", "TFRING_AUTOTUNE_SAMPLES_PER_CANDIDATE": "1",
        "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "30"})
    assert proc.stdout.count(" passed") >= np_, proc.stdout[-3000:]
    rows = list(csv.DictReader(open(str(log))))
    candidates = [r for r in rows if r["event"] == "candidate"]
    assert [int(r["fusion_threshold_bytes"]) for r in candidates[:7]] == THRESHOLDS
    assert len(candidates) == 7 + 3  # then the other cycle times at the best threshold
    assert all(float(r["bytes_per_second"]) > 0 for r in candidates)
    best = [r for r in rows if r["event"] == "best"]
    assert len(best) == 1
    top = max(candidates, key=lambda r: float(r["bytes_per_second"]))
    assert (best[0]["fusion_threshold_bytes"], best[0]["cycle_time_ms"]) == \
        (top["fusion_threshold_bytes"], top["cycle_time_ms"])


SAME_SETTINGS = r"""
import os
os.environ["TFRING_FUSION_THRESHOLD"] = str((1 + int(os.environ["OMPI_COMM_WORLD_RANK"])) << 20)
import tensorflow as tf
import tfring as hvd
hvd.init()
hvd.allreduce(tf.ones([2]), name="first")  # the first cycle ships rank 0's settings
print("TUNABLES", hvd.rank(), hvd.tunables())
"""


def test_every_rank_uses_rank_0s_fusion_threshold(tmp_path):
    # Fusion decides how many MPI calls a cycle makes: ranks with different environments must still agree.
    script = tmp_path / "same.py"
    script.write_text(SAME_SETTINGS)
    proc = run_ranks(3, [str(script)], timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("TUNABLES")]
    assert len(lines) == 3 and all(line.endswith("(1048576, 1.0)") for line in lines), lines
