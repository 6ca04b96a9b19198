"""The monitor on real ranks, torch (DistributedOptimizer): a rank slowed by 50 ms a step is named within 20 steps,
the same verdict on every rank, with one warning in the whole job. tfring is restarted first, so the monitor's
rounds start afresh (tests/monitor/straggler_job.py holds the loop)."""
import tfring.torch as hvd
from straggler_job import check_named, check_one_warning, restart, straggle
from torch_helpers import init

R, N = init()


def test_a_rank_slowed_by_50ms_per_step_is_named_within_20_steps(capfd):
    restart(hvd)
    result = straggle("torch", slow_rank=1, sleep=0.05, steps=30)
    check_named(result, N, 1)
    check_one_warning(capfd.readouterr().err, 1)
