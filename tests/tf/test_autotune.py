"""TFRING_AUTOTUNE=1 at np=2 and 3: rank 0 tunes while real collectives run; every rank checks its results, all
ranks apply each setting, and the CSV log shows the search and the chosen setting. (That every rank takes rank 0's
fusion threshold whatever its own environment says: tests/tf/ranks_promises_knobs.py, in the shared launches.)"""
import csv

import pytest

from conftest import run_rank_pytest

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
