"""An elastic slot job (tfring.runner.slots.elastic_job, behind tfring.spark.run_elastic and tfring.ray's elastic
executors) across emulated hosts (network namespaces, tests/hosts/): the driver and its mpirun in h1's namespace,
slots as plain Python processes calling serve_slot, 0 and 1 on h1 (their ranks under the driver's mpirun), 2 on h2
(its rank under the PRRTE daemon slot 2 runs). Slot 1 is SIGKILLed mid-training: the job shrinks; then slot 4
starts on h3, a host the job does not run on (Open MPI 5.0.11 fails a spawn onto a host added through the slot
agent), and slot 3 on h2: the driver starts the job again on every live slot at rank 0's next commit, which the new
ranks resume from (slot 3 may also come by a spawn onto h2 if it registered after that); the job ends on 4 ranks.
Needs root and `ip netns`."""
import io
import os
import signal
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest

pytest.importorskip("torch", reason="torch is not installed: the ranks of this test use tfring.torch")

from conftest import hosts_unavailable, rank_env  # noqa: E402
from test_multihost import NH  # noqa: E402
from test_multihost_slots import SLOT  # noqa: E402
import test_multihost_slots as slots_test  # noqa: E402

from tfring.runner.slots.elastic_job import ElasticSlotJob  # noqa: E402

pytestmark = pytest.mark.slow

cloudpickle.register_pickle_by_value(sys.modules[__name__])
NETNS_ENV = {"NETNS_HOSTS_PREFIX": "tfre%d" % (os.getpid() % 1000),
             "NETNS_HOSTS_SUBNET": "10.234.%d" % (os.getpid() % 200)}


def _nh(*args):
    return subprocess.run(NH + list(args), env=dict(os.environ, **NETNS_ENV), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)


@pytest.fixture(scope="module")
def hosts():
    import shutil
    if os.geteuid() != 0 or not shutil.which("ip"):
        hosts_unavailable("emulated hosts need root and iproute2")
    up = _nh("up", "3")
    if up.returncode != 0:
        _nh("down")
        hosts_unavailable("could not create network namespaces: %s" % up.stdout.strip()[-300:])
    saved = dict(slots_test.NETNS_ENV)
    slots_test.NETNS_ENV.update(NETNS_ENV)  # its _in_netns helper joins this module's namespaces
    try:
        yield
    finally:
        slots_test.NETNS_ENV.clear()
        slots_test.NETNS_ENV.update(saved)
        for _ in range(3):
            _nh("down")
            if not any(n.startswith(NETNS_ENV["NETNS_HOSTS_PREFIX"] + "-") for n in os.listdir("/var/run/netns")):
                break
            time.sleep(1)


def _train(training):
    import hashlib
    import os
    import socket
    import time

    import torch

    import tfring.torch as hvd
    hvd.init()
    state = hvd.elastic.ObjectState(step=0, sizes=[])

    @hvd.elastic.run
    def loop(state):
        # Until the job is at 4 ranks for 40 steps after it shrank (at most 1500 steps).
        while state.step < 1500 and not (len(state.sizes) > 40 and state.sizes[-40:] == [4] * 40
                                         and 2 in state.sizes):
            total = float(hvd.allreduce(torch.ones(1), op=hvd.Sum, name="count"))
            state.sizes.append(int(total))
            state.step += 1
            time.sleep(0.03)
            if state.step % 5 == 0:
                state.commit()
                open(training, "a").close()  # the test kills a slot only once the job trains (not during init)
    loop(state)
    return {"slot": os.environ.get("TFRING_SLOT_INDEX"), "host": socket.gethostname(), "size": hvd.size(),
            "rank": hvd.rank(), "state": hashlib.sha256(repr((state.step, state.sizes)).encode()).hexdigest(),
            "sizes": sorted(set(state.sizes))}


def test_shrink_then_grow_onto_a_new_host(hosts, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    address = "%s.%d" % (NETNS_ENV["NETNS_HOSTS_SUBNET"], 11)
    job = slots_test._in_netns("h1", lambda: ElasticSlotJob(
        3, 2, 4, address, env=rank_env(), stdout=out, stderr=err, local_host="h1").start())
    script = tmp_path / "slot.py"
    script.write_text(SLOT)
    env = dict(rank_env(), TEST_SLOT_SECRET=job.secret, **NETNS_ENV)

    def slot(index, host):
        return subprocess.Popen(NH + ["exec", host, sys.executable, str(script), job.address, str(index), host],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs = [slot(0, "h1"), slot(1, "h1"), slot(2, "h2")]
    try:
        slots_test._in_netns("h1", lambda: job.wait_ready(60))  # mpirun starts in h1's namespace

        training = tmp_path / "training"

        def chaos():
            deadline = time.time() + 120  # under load the ranks may still import torch 8 s after the start
            while not training.exists() and time.time() < deadline:
                time.sleep(0.1)
            time.sleep(1)
            os.kill(job.slots.slots[1]["pid"], signal.SIGKILL)
            time.sleep(3)
            procs.append(slot(4, "h3"))
            procs.append(slot(3, "h2"))
        threading.Thread(target=chaos, daemon=True).start()
        res = job.call(_train, args=(str(training),), timeout=240)
        log = out.getvalue()[-3000:] + err.getvalue()[-6000:]
        assert sorted(r["slot"] for r in res) == ["0", "2", "3", "4"], log
        assert [r["rank"] for r in res] == [0, 1, 2, 3] and all(r["size"] == 4 for r in res), log
        assert len({r["state"] for r in res}) == 1, log  # the newcomers received the committed state
        hosts = {r["slot"]: r["host"] for r in res}
        assert (hosts["2"], hosts["3"], hosts["4"]) == ("h2", "h2", "h3"), hosts
        assert "on host h3, which the job does not run on: starting the job again on the live slots" in log, log
        assert res[0]["sizes"][-1] == 4 and 2 in res[0]["sizes"], res[0]
        assert job.book.reasons[0][1] == "failure", job.book.reasons
    finally:
        sys.stdout.write(out.getvalue()[-3000:] + err.getvalue()[-20000:])
        job.stop(10)
        job.close()
        for proc in procs:
            proc.kill()
            proc.wait(20)
