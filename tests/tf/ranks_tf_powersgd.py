"""tfring.DistributedGradientTape(compression=Compression.powersgd(...)) on real ranks: a tf.function training loop
that makes a new tape every step (Horovod's pattern) ends with the weights of the float64 numpy simulation of every
rank's PowerSGD (tests/powersgd_reference.py), identical on every rank, eagerly too; what does not combine is
refused by name."""
import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from powersgd_reference import LR, STEPS, batch, initial_weights, simulated

hvd.init()
R, N = hvd.rank(), hvd.size()


@pytest.mark.parametrize("traced,rank,warmup", [(True, 2, 1), (False, 1, 0)])
def test_tape_loop_matches_a_simulation_of_every_rank(traced, rank, warmup):
    config = hvd.Compression.powersgd(rank=rank, warmup_steps=warmup, seed=int(traced))
    kernel, bias = (tf.Variable(w) for w in initial_weights())

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, kernel) + bias - y) ** 2)
        tape = hvd.DistributedGradientTape(tape, compression=hvd.Compression.powersgd(
            rank=rank, warmup_steps=warmup, seed=int(traced)))  # equal settings: the same state every step
        for v, g in zip((kernel, bias), tape.gradient(loss, [kernel, bias])):
            v.assign_sub(LR * g)
    step = tf.function(step) if traced else step
    for s in range(STEPS):
        step(*batch(s, R))
    for name, got, want in zip(("kernel", "bias"), (kernel.numpy(), bias.numpy()), simulated(config, N)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg="rank %d, %s" % (R, name))
        assert all(np.array_equal(got, other) for other in hvd.allgather_object(got)), name


def test_what_does_not_combine_is_refused():
    with tf.GradientTape() as tape:
        pass
    for kwargs, what in ((dict(groups=2), "groups=2"), (dict(op=hvd.Adasum), "op=")):
        with pytest.raises(ValueError, match="does not combine with %s" % what):
            hvd.DistributedGradientTape(tape, compression=hvd.Compression.powersgd(), **kwargs)
