"""The monitor on real ranks, torch (DistributedOptimizer): a rank slowed by 50 ms a step is named within 20 steps,
the same verdict on every rank, with one warning in the whole job; rank 0's Prometheus endpoint serves every rank's
numbers, as hvd.metrics() has them on every rank, to the bearer token only. tfring is restarted first, so the
monitor's rounds start afresh (tests/monitor/straggler_job.py holds the loop)."""
import os
import stat
import tempfile
import time

from mpi4py import MPI

import tfring.torch as hvd
from straggler_job import (check_named, check_one_warning, check_scrape, check_totals, restart, scrape,
                           steady_scrape, straggle)
from tfring.common import metrics_endpoint
from torch_helpers import init

R, N = init()


def test_a_rank_slowed_by_50ms_per_step_is_named_within_20_steps(capfd):
    restart(hvd)
    result = straggle("torch", slow_rank=1, sleep=0.05, steps=30)
    check_named(result, N, 1)
    check_one_warning(capfd.readouterr().err, 1)


def test_rank_0_serves_every_ranks_metrics_to_a_prometheus_scrape_with_the_token_only():
    comm = MPI.COMM_WORLD
    private = comm.bcast(tempfile.mkdtemp() if R == 0 else None)  # one machine: rank 0 writes the token file
    token_file = os.path.join(private, "sub", "token")
    settings = {"TFRING_METRICS_PORT": str(comm.bcast(_free_port() if R == 0 else None)),
                "TFRING_METRICS_TOKEN_FILE": token_file, "TFRING_MONITOR_INTERVAL_SECONDS": "0.2"}
    os.environ.update(settings)
    try:
        restart(hvd)  # rank 0 starts the endpoint at init
        straggle("torch", steps=12, mark=True)
        # The round holding the last step comes within the interval; the totals stay the same after it (rounds
        # go on, with no collective in them).
        deadline = time.monotonic() + 30
        while (hvd.metrics() or {}).get("total_steps") != 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        mine = hvd.metrics()
        if R == 0:
            assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
            scraped, m = steady_scrape(token_file, hvd.metrics)
            check_scrape(scraped, m, events={"resets": 0, "ranks_lost": 0, "ranks_added": 0})
            refused = [scrape(token_file, token="")[0], scrape(token_file, token="x" * 43)[0],
                       scrape(token_file, method="POST")[0], scrape(token_file, path="/other")[0]]
            assert refused == [401, 401, 405, 404], refused
        else:
            assert metrics_endpoint.address() is None  # rank 0's alone
            scraped = None
        scraped = comm.bcast(scraped)
        assert mine["total_steps"] == 12 and mine["size"] == N
        check_totals(scraped, mine)  # on every rank: rank 0 served what every rank's hvd.metrics() says
    finally:
        for name in settings:
            del os.environ[name]
        restart(hvd)
    assert metrics_endpoint.address() is None  # stopped with the runtime, not restarted without the setting


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
