"""The elastic slot job (the driver of tfring.spark.run_elastic and tfring.ray's elastic executors) when its mpirun
dies mid-training (Open MPI 5.0.11's prterun can crash in a spawn across hosts, docs/elastic.md): the driver starts
mpirun again on the live slots and the new ranks resume from the last commit, as tfringrun does. Slots are plain
Python processes calling serve_slot on this machine; the ranks use tfring.torch."""
import io
import os
import signal
import subprocess
import sys
import threading
import time

import cloudpickle
import psutil
import pytest

pytest.importorskip("torch", reason="torch is not installed: the ranks of this test use tfring.torch")

from conftest import rank_env  # noqa: E402

from tfring.runner.slots.elastic_job import ElasticSlotJob  # noqa: E402

pytestmark = pytest.mark.slow
cloudpickle.register_pickle_by_value(sys.modules[__name__])
SLOT = """import os, sys
from tfring.runner.slots.task import serve_slot
serve_slot(sys.argv[1], os.environ.pop("TEST_SLOT_SECRET"), int(sys.argv[2]))
"""


def _train(progress):
    import hashlib
    import os
    import time

    import torch

    import tfring.torch as hvd
    hvd.init()
    state = hvd.elastic.ObjectState(step=0, total=0.0)
    first = []

    @hvd.elastic.run
    def loop(state):
        while state.step < 80:
            if not first:
                first.append(state.step)  # where this process started: 0, or the commit it resumed from
            state.total += float(hvd.allreduce(torch.full((4,), float(state.step)), op=hvd.Sum, name="x")[0])
            state.step += 1
            time.sleep(0.05)
            if state.step % 5 == 0:
                state.commit()
                if hvd.rank() == 0:
                    with open(progress, "a") as f:
                        f.write("%d %d\n" % (state.step, os.getpid()))
    loop(state)
    return {"first": first[0], "pid": os.getpid(), "size": hvd.size(),
            "state": hashlib.sha256(repr((state.step, state.total)).encode()).hexdigest()}


def _mpirun_below(pid):
    for child in psutil.Process(pid).children(recursive=True):
        if child.name() in ("prterun", "mpirun"):
            return child.pid
    return None


def test_mpirun_killed_mid_job_is_started_again_and_resumes_from_the_last_commit(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    job = ElasticSlotJob(2, 2, 2, "127.0.0.1", env=rank_env(), stdout=out, stderr=err).start()
    script = tmp_path / "slot.py"
    script.write_text(SLOT)
    env = dict(rank_env(), TEST_SLOT_SECRET=job.secret)
    procs = [subprocess.Popen([sys.executable, str(script), job.address, str(i)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(2)]
    progress = tmp_path / "progress"
    seen = {}

    def lines():
        return [line.split() for line in progress.read_text().split("\n") if line] if progress.exists() else []

    def crash():
        deadline = time.time() + 120  # under load the ranks may still import torch long after the start
        while time.time() < deadline and len(lines()) < 2:
            time.sleep(0.05)
        seen["commits"], seen["pids"] = [int(s) for s, _ in lines()], {int(p) for _, p in lines()}
        os.kill(_mpirun_below(os.getpid()), signal.SIGSEGV)
    try:
        job.wait_ready(60)
        threading.Thread(target=crash, daemon=True).start()
        res = job.call(_train, args=(str(progress),), timeout=240)
        log = out.getvalue()[-3000:] + err.getvalue()[-6000:]
        assert "mpirun died of signal 11: starting the job again on the live slots from the last commit" in log
        assert len(res) == 2 and all(r["size"] == 2 for r in res), log
        assert len({r["state"] for r in res}) == 1, log  # identical state on both ranks
        assert not {r["pid"] for r in res} & seen["pids"], (res, seen)  # new processes finished the job
        # They resumed from a commit made before the crash or after the last one seen (never from the start).
        assert all(r["first"] >= seen["commits"][-1] > 0 for r in res), (res, seen)
        assert [reason for _, reason, _ in job.book.reasons] == [], job.book.reasons  # a relaunch is no reset
    finally:
        sys.stdout.write(out.getvalue()[-3000:] + err.getvalue()[-20000:])
        job.stop(10)
        job.close()
        for proc in procs:
            proc.kill()
            proc.wait(20)
