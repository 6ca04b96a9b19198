"""TFRING_AUTOTUNE=1 in the shared TF launch at np=3: rank 0 tunes while real collectives run; a
gradient-like set of tensors is reduced until it settled, every result checked on every rank (ranks that disagreed
on the fusion threshold or switched at different cycles would fail here, or stall); every rank ends on the setting
rank 0 chose, and its CSV log shows the search (each fusion threshold, then the other cycle times at the best) and
the chosen setting."""
import csv
import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import restarted

# One file for the launch, the same name on every rank (PMIX_NAMESPACE: the job's id), written by rank 0 only.
LOG = os.path.join(tempfile.gettempdir(), "tfring-autotune-%s.csv" % os.environ.get("PMIX_NAMESPACE", os.getppid()))
THRESHOLDS = [1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20]


@pytest.fixture(scope="module", autouse=True)
def autotuning():
    with restarted(env={"TFRING_AUTOTUNE": "1", "TFRING_AUTOTUNE_LOG": LOG, "TFRING_AUTOTUNE_SAMPLE_SECONDS": "0.05",
                        "TFRING_AUTOTUNE_WARMUP_SAMPLES": "1", "TFRING_AUTOTUNE_SAMPLES_PER_CANDIDATE": "1",
                        "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "30"}):
        yield
    if hvd.rank() == 0 and os.path.exists(LOG):
        os.remove(LOG)


def _check_log(fusion, cycle):
    rows = list(csv.DictReader(open(LOG)))
    candidates = [r for r in rows if r["event"] == "candidate"]
    assert [int(r["fusion_threshold_bytes"]) for r in candidates[:7]] == THRESHOLDS, candidates
    assert len(candidates) == 7 + 3, candidates  # then the other cycle times at the best threshold
    assert all(float(r["bytes_per_second"]) > 0 for r in candidates)
    best = [r for r in rows if r["event"] == "best"]
    assert len(best) == 1, rows
    top = max(candidates, key=lambda r: float(r["bytes_per_second"]))
    assert (best[0]["fusion_threshold_bytes"], best[0]["cycle_time_ms"]) == \
        (top["fusion_threshold_bytes"], top["cycle_time_ms"])
    assert (fusion, cycle) == (int(best[0]["fusion_threshold_bytes"]), float(best[0]["cycle_time_ms"]))


def test_results_stay_exact_while_the_tuner_switches_settings_and_every_rank_ends_on_its_choice():
    rng = np.random.RandomState(0)
    shapes = [(256, 256), (1024,), (64, 64, 3), (10,), (512, 128), (7,)] * 4
    base = [rng.randint(-50, 50, size=s).astype(np.float32) for s in shapes]
    grads = [tf.constant(b * (hvd.rank() + 1)) for b in base]
    expect = [b * sum(r + 1 for r in range(hvd.size())) for b in base]

    @tf.function
    def step(gs):
        return hvd.grouped_allreduce(gs, op=hvd.Sum, name="autotuned")

    settled = False
    for i in range(20000):
        for o, e in zip(step(grads), expect):
            np.testing.assert_array_equal(o.numpy(), e)
        if i % 10 == 0:
            mine = 1 if hvd.rank() == 0 and os.path.exists(LOG) and "\nbest," in open(LOG).read() else 0
            if hvd.broadcast(tf.constant(mine), 0, name="settled").numpy():
                settled = True
                break
    assert settled, "the autotuner did not settle"
    # Every rank runs with the setting rank 0 chose (the settling broadcast ran after the switch).
    fusion, cycle = hvd.tunables()
    assert hvd.allgather_object((fusion, cycle)) == [(fusion, cycle)] * hvd.size()
    error = None
    if hvd.rank() == 0:
        try:
            _check_log(fusion, cycle)
        except AssertionError as e:
            error = "rank 0: %s" % e
    error = hvd.broadcast_object(error, 0)  # every rank passes or fails alike
    assert error is None, error
