"""The monitor on real ranks, JAX (DistributedOptimizer in a jitted step): a rank slowed by 50 ms a step is named
within 20 steps, the same verdict on every rank, with one warning in the whole job (rank 0 at np=2, the last rank at
np=3). tfring is restarted first, so the monitor's rounds start afresh (tests/monitor/straggler_job.py holds the
loop)."""
import tfring.jax as hvd
from straggler_job import check_named, check_one_warning, restart, straggle

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()


def test_a_rank_slowed_by_50ms_per_step_is_named_within_20_steps(capfd):
    slow = 0 if N == 2 else N - 1
    restart(hvd)
    result = straggle("jax", slow_rank=slow, sleep=0.05, steps=30)
    check_named(result, N, slow)
    check_one_warning(capfd.readouterr().err, slow)
