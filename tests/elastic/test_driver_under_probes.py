"""A live elastic job while a peer without the secret probes its driver (issue #31's "the job's result is
unchanged"): tfringrun --min-np 2 runs two real ranks that make signed calls to the driver (as elastic ranks do)
and an MPI allreduce; meanwhile the test sends header floods, unsigned bodies, dripping senders and a burst of idle
connections to the driver from 127.0.0.2. The job must end with its result, every signed call answered, the
launcher's memory (the driver lives in it) bounded and its stderr holding a few refusal lines, not hundreds."""
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, kill_session, rank_env

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]

JOB = """
import os, sys, time
from mpi4py import MPI
from tfring.common.signed_channel import client_from_env
comm = MPI.COMM_WORLD
if comm.rank == 0:
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(os.environ["TFRING_ELASTIC_DRIVER"])
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
client = client_from_env()
worst = 0.0
for i in range(24):  # signed calls for ~6 s, while the probes run
    start = time.perf_counter()
    client.call("/log", {"message": "rank %d call %d" % (comm.rank, i)})
    worst = max(worst, time.perf_counter() - start)
    time.sleep(0.25)
print("RESULT", comm.rank, comm.allreduce(comm.rank + 1), "%.4f" % worst, flush=True)
"""


def rss_mib(pid):
    fields = dict(line.split(":", 1) for line in open("/proc/%d/status" % pid))
    return int(fields["VmRSS"].split()[0]) / 1024


def attacker(host, port, head, chunk=b"", total=0, drip=0.0):
    """One probing connection from 127.0.0.2: sends `head`, then `chunk` up to `total` bytes (or one byte every
    `drip` seconds) until the driver closes it; at most 20 s."""
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
            s.settimeout(20)
            s.connect((host, port))
            s.sendall(head)
            end, sent = time.monotonic() + 20, 0
            while time.monotonic() < end and (sent < total or drip):
                if drip:
                    s.sendall(b"x")
                    time.sleep(drip)
                else:
                    s.sendall(chunk)
                    sent += len(chunk)
            s.recv(1)
    except OSError:
        pass  # the driver closed it: what it should do


def test_a_probed_driver_keeps_the_job_result_and_its_bounds(tmp_path):
    job, address_file = tmp_path / "job.py", tmp_path / "driver"
    job.write_text(JOB)
    proc = subprocess.Popen([sys.executable, "-m", "tfring.runner", "-np", "2", "--min-np", "2", "python", str(job),
                             str(address_file)], cwd=ROOT, env=rank_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not address_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert address_file.exists(), proc.communicate(timeout=60)[0][-5000:]
        host, port = address_file.read_text().rsplit(":", 1)
        port, base, peak = int(port), rss_mib(proc.pid), 0.0
        probes = [((b"POST /hosts HTTP/1.1\r\nHost: x\r\n", b"X-Pad: " + b"a" * 65520 + b"\r\n", 1 << 20),
                   {}) for _ in range(16)]
        probes += [((b"POST /hosts HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (16 << 20),
                     b"\0" * (1 << 20), 16 << 20), {}) for _ in range(4)]
        probes += [((b"POST /hosts HTTP/1.1\r\n",), {"drip": 1.0}) for _ in range(8)]
        probes += [((b"",), {}) for _ in range(100)]  # idle connections
        threads = [threading.Thread(target=attacker, args=(host, port) + a, kwargs=k, daemon=True)
                   for a, k in probes]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads) and proc.poll() is None:
            peak = max(peak, rss_mib(proc.pid))
            time.sleep(0.02)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            kill_session(proc.pid)
    assert proc.returncode == 0, out[-5000:]
    results = sorted(line.split("RESULT ", 1)[1].split() for line in out.splitlines() if "RESULT " in line)
    assert [r[:2] for r in results] == [["0", "3"], ["1", "3"]], out[-5000:]  # 1 + 2 on both ranks
    worst = max(float(r[2]) for r in results)
    print("driver RSS +%.1f MiB at peak; slowest signed call %.1f ms" % (peak - base, worst * 1e3))
    assert worst < 5, out[-5000:]  # every signed call answered (the client's deadline is 10 s)
    assert peak - base <= 16, (base, peak)
    for rank in range(2):  # every signed /log call reached the launcher's stderr, once
        assert sum("rank %d call " % rank in line for line in out.splitlines()) == 24, out[-5000:]
    refusals = [line for line in out.splitlines() if "refused" in line]
    assert 1 <= len(refusals) <= 4, refusals  # rate-limited: hundreds of refusals, a few lines
