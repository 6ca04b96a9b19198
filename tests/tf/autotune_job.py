"""Rank-side autotune check (run by tests/tf/test_autotune.py with TFRING_AUTOTUNE=1): a gradient-like set of
tensors is reduced until rank 0's autotuner has settled; every result is checked on every rank, so ranks that
disagreed on the fusion threshold or switched at different cycles would fail here (or stall)."""
import os

import numpy as np
import tensorflow as tf

import tfring as hvd


def test_results_stay_exact_while_the_tuner_switches_settings():
    hvd.init()
    log = os.environ["TFRING_AUTOTUNE_LOG"]
    rng = np.random.RandomState(0)
    shapes = [(256, 256), (1024,), (64, 64, 3), (10,), (512, 128), (7,)] * 4
    base = [rng.randint(-50, 50, size=s).astype(np.float32) for s in shapes]
    grads = [tf.constant(b * (hvd.rank() + 1)) for b in base]
    scale = sum(r + 1 for r in range(hvd.size()))
    expect = [b * scale for b in base]

    @tf.function
    def step(gs):
        return hvd.grouped_allreduce(gs, op=hvd.Sum)

    settled = False
    for i in range(20000):
        out = step(grads)
        for o, e in zip(out, expect):
            np.testing.assert_array_equal(o.numpy(), e)
        if i % 10 == 0:
            mine = 1 if hvd.rank() == 0 and os.path.exists(log) and "\nbest," in open(log).read() else 0
            if hvd.broadcast(tf.constant(mine), 0, name="settled").numpy():
                settled = True
                break
    assert settled, "the autotuner did not settle"
    # Every rank runs with the setting rank 0 chose (the settling broadcast ran after the switch).
    fusion, cycle = hvd.tunables()
    everyone = hvd.allgather(tf.constant([[float(fusion), cycle]]), name="tunables").numpy()
    assert (everyone == everyone[0]).all(), everyone
    if hvd.rank() == 0:
        best = [line for line in open(log).read().splitlines() if line.startswith("best,")][0].split(",")
        assert (fusion, cycle) == (int(best[1]), float(best[2])), (fusion, cycle, best)
