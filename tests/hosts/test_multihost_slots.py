"""The slot launcher (tfring.runner.slots: job, task, agent, rank) across emulated hosts (network
namespaces, tests/hosts/): slots are plain Python processes calling serve_slot, 2 on h1 and 1 on h2; the driver
(SlotJob) lives in this process, its socket in h1's namespace. The rank on h2 runs under a PRRTE daemon that
slot_agent had h2's slot start. Every address in play is an emulated host's (Open MPI sees only those namespaces'
interfaces, and the launcher restricts it to the slots' addresses). Needs root and `ip netns`."""
import ctypes
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest

# The ranks use tfring.torch (several ranks importing TensorFlow on 2 cores take long): torch comes with CI's set-up.
pytest.importorskip("torch", reason="torch is not installed: the ranks of this test use tfring.torch")

from conftest import hosts_unavailable, rank_env  # noqa: E402
from test_multihost import NH  # noqa: E402

from tfring.runner.slots import job as slots  # noqa: E402

pytestmark = pytest.mark.slow  # launches real ranks or jobs

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import this test file
NETNS_ENV = {"NETNS_HOSTS_PREFIX": "tfrs%d" % (os.getpid() % 1000),
             "NETNS_HOSTS_SUBNET": "10.233.%d" % (os.getpid() % 200)}
LAYOUT = ["h1", "h1", "h2"]  # slot index -> emulated host
SLOT = """import os, sys
from tfring.runner.slots.task import serve_slot
secret = os.environ.pop("TEST_SLOT_SECRET")  # from the environment: never on a command line
serve_slot(sys.argv[1], secret, int(sys.argv[2]), host_id=sys.argv[3])
"""


def _nh(*args):
    return subprocess.run(NH + list(args), env=dict(os.environ, **NETNS_ENV), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)


def _address(host):
    return "%s.%d" % (NETNS_ENV["NETNS_HOSTS_SUBNET"], 10 + int(host[1:]))


def _pids(host):
    return [int(p) for p in _nh("pids", host).stdout.split()]


@pytest.fixture(scope="module")
def hosts():
    if os.geteuid() != 0 or not shutil.which("ip"):
        hosts_unavailable("emulated hosts need root and iproute2")
    up = _nh("up", "2")
    if up.returncode != 0:
        _nh("down")
        hosts_unavailable("could not create network namespaces: %s" % up.stdout.strip()[-300:])
    yield
    for _ in range(3):  # a namespace left behind would collide with a later run
        _nh("down")
        if not any(n.startswith(NETNS_ENV["NETNS_HOSTS_PREFIX"] + "-") for n in os.listdir("/var/run/netns")
                   if os.path.isdir("/var/run/netns")):
            break
        time.sleep(1)


def _in_netns(host, fn):
    """fn() in a thread that joined host's network namespace (sockets it creates stay there)."""
    out = {}

    def run():
        try:
            fd = os.open("/var/run/netns/%s-%s" % (NETNS_ENV["NETNS_HOSTS_PREFIX"], host), os.O_RDONLY)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) != 0:  # CLONE_NEWNET: this thread only
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
            out["value"] = fn()
        except BaseException as e:  # re-raised in the caller
            out["error"] = e
    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if "error" in out:
        raise out["error"]
    return out["value"]


class Job:
    """A SlotJob driver (in h1's namespace) and its slot processes (LAYOUT)."""

    def __init__(self, tmp_path):
        self.out, self.err = io.StringIO(), io.StringIO()
        self.job = _in_netns("h1", lambda: slots.SlotJob(
            len(LAYOUT), _address("h1"), env=rank_env(), stdout=self.out, stderr=self.err).start())
        script = tmp_path / "slot.py"
        script.write_text(SLOT)
        env = dict(rank_env(), TEST_SLOT_SECRET=self.job.secret, **NETNS_ENV)
        self.procs = [subprocess.Popen(NH + ["exec", h, sys.executable, str(script), self.job.address, str(i), h],
                                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                      for i, h in enumerate(LAYOUT)]
        self.job.wait_ready(60)
        self.slot_pids = [self.job._slots[i]["pid"] for i in range(len(LAYOUT))]

    def output(self):
        return self.out.getvalue()[-3000:] + self.err.getvalue()[-3000:]

    def close(self):
        """Stops the job; returns the slots' stderr once every process on both hosts is gone (or after 20 s)."""
        self.job.stop(10)
        sys.stdout.write(self.output())
        errs = []
        for proc in self.procs:
            try:
                errs.append(proc.communicate(timeout=20)[1])
            except subprocess.TimeoutExpired:
                proc.kill()
                errs.append(proc.communicate()[1])
        self.job.close()
        deadline = time.monotonic() + 20
        while (_pids("h1") or _pids("h2")) and time.monotonic() < deadline:
            time.sleep(0.2)
        return errs


def _bounded(fn, args, seconds):
    """(what fn(*args) returned or raised, seconds it took), run in a thread: a hang fails instead of blocking."""
    out, began = [], time.monotonic()

    def run():
        try:
            out.append(fn(*args))
        except Exception as e:  # the caller checks it
            out.append(e)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, "still blocked after %g s" % seconds
    return out[0], time.monotonic() - began


def _whoami():
    import os
    import socket

    import torch

    import tfring.torch as tfring  # no TensorFlow: several ranks importing it on a small machine take long
    tfring.init()
    total = float(tfring.allreduce(torch.tensor(tfring.rank() + 1.0), op=tfring.Sum, name="across"))
    chain, pid = [], os.getpid()
    while pid > 1:  # (pid, name) from this rank up to init
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        chain.append((pid, stat.split("(", 1)[1].rsplit(")", 1)[0]))
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return {"ids": [tfring.rank(), tfring.size(), tfring.local_rank(), tfring.local_size(), tfring.cross_size()],
            "host": socket.gethostname(), "total": total, "nics": os.environ.get("OMPI_MCA_btl_tcp_if_include"),
            "chain": chain, "slot": os.environ.get("TFRING_SLOT_INDEX")}


def _raise_on(rank, then_block):
    import torch

    import tfring.torch as tfring
    if tfring.rank() == rank:
        raise ValueError("rank %d gives up" % rank)
    if then_block:  # a collective the raising rank never joins
        tfring.allreduce(torch.ones(1), name="never_complete")
    return "returned"


def _allreduce_forever():
    import time

    import torch

    import tfring.torch as tfring
    tfring.init()
    while True:
        tfring.allreduce(torch.ones(100), name="loop")
        time.sleep(0.05)


def test_ranks_span_two_hosts_through_the_slots(hosts, tmp_path, monkeypatch):
    monkeypatch.setattr(slots, "SETTLE", 3.0)
    job = Job(tmp_path)
    try:
        res = job.job.call(_whoami)
        assert [r["ids"] for r in res] == [[0, 3, 0, 2, 2], [1, 3, 1, 2, 1], [2, 3, 0, 1, 2]], job.output()
        assert [r["host"] for r in res] == ["h1", "h1", "h2"]
        assert [r["total"] for r in res] == [6.0] * 3  # 1 + 2 + 3 across the hosts
        # Rank traffic restricted to the emulated network (the launcher's default, from the slots' interfaces).
        assert [r["nics"] for r in res] == [NETNS_ENV["NETNS_HOSTS_SUBNET"] + ".0/24"] * 3
        assert [r["slot"] for r in res] == ["0", "1", "2"] and [job.job.slot_of(r) for r in range(3)] == [0, 1, 2]
        for rank, r in enumerate(res):
            pids, names = [p for p, _ in r["chain"]], [n for _, n in r["chain"]]
            if rank < 2:  # under slot 0's mpirun
                assert names[1] == "prterun" and job.slot_pids[0] in pids, r["chain"]
            else:  # rank -> prted -> (sh) -> h2's slot, and nothing of h1
                assert names[1] == "prted" and job.slot_pids[2] in pids, r["chain"]
                assert not {job.slot_pids[0], job.slot_pids[1]} & set(pids) and "prterun" not in names, r["chain"]
        assert [r["chain"][0][0] for r in res] == job.job.call(os.getpid)  # the same (persistent) ranks
        with pytest.raises(slots.RankError, match="rank 1 raised:(.|\n)*ValueError: rank 1 gives up") as info:
            job.job.call(_raise_on, (1, False))
        assert info.value.rank == 1
        assert job.job.call(lambda: "still fine") == ["still fine"] * 3  # every rank had returned: not broken
        began = time.monotonic()
        with pytest.raises(slots.RankError) as info:  # ranks 0 and 1 stay blocked in the allreduce
            job.job.call(_raise_on, (2, True))
        # Deadlines, not speed: waiting out SETTLE here (or below, after the verdict) is the failure they catch.
        assert info.value.rank == 2 and time.monotonic() - began < slots.SETTLE
        for most in (slots.SETTLE + 2, slots.SETTLE / 2):  # the first waits for the verdict, the next fails at once
            later = _bounded(job.job.call, (lambda: 1,), 10)  # ranks 0 and 1 would never take it
            assert isinstance(later[0], RuntimeError) and later[1] < most, later
            assert re.search(r"cannot run more calls.*rank 2 raised.*rank 0 \(slot 0, host h1\)", str(later[0]))
        os.kill(job.slot_pids[0], signal.SIGKILL)  # slot 0 (mpirun) gone: stop() must not wait its timeout
        began = time.monotonic()
        assert job.job.stop(30) is False
        assert time.monotonic() - began < slots.STOP_SILENCE + 3
    finally:
        job.close()
    assert _pids("h1") == [] and _pids("h2") == []


@pytest.mark.parametrize("victim,named", [(2, "slot 2 (host h2) died (rank 2 saw it)"),
                                          (1, "slot 1 (host h1) died (rank 1 saw it)")])
def test_a_dead_slot_ends_the_call_naming_it(hosts, tmp_path, victim, named):
    """Slot 2 runs h2's daemon; slot 1 is an ancestor of no process (its rank lives under slot 0's mpirun) and
    is watched by its rank."""
    job = Job(tmp_path)
    try:
        assert len(job.job.call(os.getpid)) == 3
        outcome = {}

        def call():
            try:
                outcome["value"] = job.job.call(_allreduce_forever)
            except Exception as e:  # checked below
                outcome["error"] = e
        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        time.sleep(2)
        began = time.monotonic()
        os.kill(job.slot_pids[victim], signal.SIGKILL)
        caller.join(40)
        elapsed = time.monotonic() - began
        assert not caller.is_alive(), "call still running 40 s after slot %d died\n%s" % (victim, job.output())
        assert isinstance(outcome.get("error"), RuntimeError), outcome
        assert named in str(outcome["error"]), str(outcome["error"]) + job.output()
        assert elapsed < 20, elapsed
        print("slot %d killed: %.1f s: %s" % (victim, elapsed, outcome["error"]))
    finally:
        job.close()
    assert _pids("h1") == [] and _pids("h2") == []
