"""The slot launcher's reports survive loss (issue #31): a SlotJob and two slots (serve_slot threads, as the Ray
actors run them) talk through a loopback proxy that loses chosen requests or replies; the slots run real mpirun
and real ranks (one host, 127.0.0.1 only). Each lost message must end in the right result, or in a named error
within its deadline."""
import io
import json
import os
import re
import socket
import sys
import threading
import time

import cloudpickle
import pytest

from tfring.runner import mpirun
from tfring.runner.slots import LaunchError, SlotJob, job as job_module
from tfring.runner.slots.task import serve_slot

pytestmark = pytest.mark.slow  # real mpirun and ranks
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import this module


def _recv_http(sock):
    # One HTTP message (head and Content-Length body) from a socket; None when it closed first.
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int((re.search(rb"(?i)content-length:\s*(\d+)", head) or [0, b"0"])[1])
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        body += chunk
    return head, body


class DropProxy:
    """A loopback proxy in front of the driver service: `rule(path, request, reply)` is asked before forwarding a
    request (reply None) and before returning the reply; True loses it (the connection closes unanswered)."""

    def __init__(self, target, rule):
        self.target, self.rule, self.lost = target.rsplit(":", 1), rule, []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            conn.settimeout(30)
            got = _recv_http(conn)
            if got is None:
                return
            path, request = got[0].split(b" ")[1].decode(), json.loads(got[1])
            if self.rule(path, request, None):
                self.lost.append((path, "request"))
                return
            with socket.create_connection((self.target[0], int(self.target[1])), timeout=30) as up:
                up.sendall(got[0] + b"\r\n\r\n" + got[1])
                answer = _recv_http(up)
            if answer is None or self.rule(path, request, json.loads(answer[1])):
                self.lost.append((path, "reply"))
                return
            conn.sendall(answer[0] + b"\r\n\r\n" + answer[1])

    def close(self):
        self.sock.close()


def first(n, pred):
    """A rule losing the first n messages for which pred(path, request, reply) holds."""
    left, lock = [n], threading.Lock()

    def rule(path, request, reply):
        with lock:
            if left[0] > 0 and pred(path, request, reply):
                left[0] -= 1
                return True
            return False
    return rule


def any_of(*rules):
    return lambda *message: any(r(*message) for r in rules)


@pytest.fixture
def slot_job():
    made = []

    def start(rule=lambda *m: False, num=2, launch_args=(), stop_timeout=10):
        job = SlotJob(num, "127.0.0.1", launch_args=launch_args, log=io.StringIO(), stdout=io.StringIO(),
                      stderr=io.StringIO()).start()
        proxy, stop = DropProxy(job.address, rule), threading.Event()
        threads = [threading.Thread(target=serve_slot, args=(proxy.address, job.secret, i), daemon=True,
                                    kwargs={"host_id": "one-host", "bind_host": "127.0.0.1", "stop": stop,
                                            "log": io.StringIO()}) for i in range(num)]
        for t in threads:
            t.start()
        made.append((job, proxy, stop, threads, stop_timeout))
        return job, proxy
    yield start
    for job, proxy, stop, threads, stop_timeout in made:
        proxy.rule = lambda *m: False  # the test's losses are over: the slots' last reports reach the driver
        job.stop(stop_timeout)
        heard = time.monotonic() + 1.5  # the slots hear stop on their next poll and end by themselves
        for t in threads:
            t.join(max(0.0, heard - time.monotonic()))
        stop.set()
        for t in threads:
            t.join(30)
        job.close()
        proxy.close()
        assert not any(t.is_alive() for t in threads)


def _rank():
    return int(os.environ["OMPI_COMM_WORLD_RANK"])


def _exit_on_rank_1():
    if os.environ["OMPI_COMM_WORLD_RANK"] == "1":
        os._exit(3)
    time.sleep(60)


def _is_exit(path, request, reply):
    return path == "/exit" or (path == "/status" and "exit" in request)


def test_lost_replies_and_reports_still_end_in_the_results(slot_job):
    rule = any_of(
        first(2, lambda p, q, r: p == "/status" and r is not None and "launch" in r),  # the spec, twice
        first(1, lambda p, q, r: p == "/call" and r is not None and "seq" in r),  # a rank's call
        first(1, lambda p, q, r: p == "/result" and r is not None),  # a rank's result was stored: ack lost
        first(1, lambda p, q, r: p == "/exit" and r is None),  # mpirun's exit report itself
        first(1, lambda p, q, r: p == "/status" and "exit" in q and r is None))  # and its repeat in a poll
    job, proxy = slot_job(rule)
    owner = threading.current_thread()

    def alive():  # a scheduler call must not hold the job's lock (it would stall every handler)
        blocked = []
        t = threading.Thread(target=lambda: blocked.append(not job._cond.acquire(timeout=2) or job._cond.release()))
        t.start()
        t.join()
        assert blocked == [None] and threading.current_thread() is owner
    job.wait_ready(30, alive)
    assert job.call(_rank, alive=alive, timeout=60) == [0, 1]
    assert job.call(lambda x: x * 2, (21,), timeout=60) == [42, 42]
    assert job.stop(20) is True  # mpirun's exit reached the driver
    lost = {what for what in proxy.lost}
    assert {("/status", "reply"), ("/call", "reply"), ("/result", "reply"), ("/exit", "request")} <= lost


@pytest.mark.parametrize("lose", ["first /exit tries and every poll", "every /exit"])
def test_a_lost_exit_report_still_fails_the_call_at_once(slot_job, lose):
    if lose == "every /exit":
        rule = lambda p, q, r: p == "/exit" and r is None  # noqa: E731 (the status polls carry it)
    else:
        rule = any_of(first(3, lambda p, q, r: p == "/exit" and r is None),
                      lambda p, q, r: p == "/status" and "exit" in q and r is None)
    job, proxy = slot_job(rule)
    job.wait_ready(30)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="mpirun exited with code"):
        job.call(_exit_on_rank_1, timeout=60)
    assert time.monotonic() - start < 30
    assert ("/exit", "request") in proxy.lost


def test_an_exit_report_lost_for_good_ends_at_the_call_timeout(slot_job):
    job, _ = slot_job(lambda p, q, r: _is_exit(p, q, r) and r is None, stop_timeout=1)  # no exit will come
    job.wait_ready(30)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"rank 1 .*did not return within 4 s \(timeout\)"):
        job.call(_exit_on_rank_1, timeout=4)
    assert 4 <= time.monotonic() - start < 11
    with pytest.raises(RuntimeError, match="cannot run more calls: call 1 timed out"):
        job.call(_rank, timeout=4)


def test_a_launch_spec_never_acknowledged_is_a_named_timeout(slot_job, monkeypatch):
    monkeypatch.setattr(job_module, "LAUNCH_ACK", 3.0)
    job, _ = slot_job(lambda p, q, r: p == "/status" and r is not None and "launch" in r)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"slot 0 \(host one-host\) did not acknowledge the launch within 3 s"):
        job.wait_ready(30)
    assert time.monotonic() - start < 10
    assert job.stop(5) is True  # no mpirun ran: nothing to wait for


@pytest.mark.parametrize("cause", ["bad mpi args", "no mpirun"])
def test_a_launch_failure_reaches_the_caller_at_once(slot_job, monkeypatch, cause):
    launch_args = []
    if cause == "no mpirun":
        monkeypatch.setattr(mpirun, "mpirun_path", lambda: "/nonexistent/mpirun")
    else:
        launch_args = ["--mpi-args=-x 'unbalanced"]
    # Its first report is lost as well, in /exit and in a poll.
    job, proxy = slot_job(any_of(first(1, lambda p, q, r: p == "/exit" and r is None),
                                 first(1, lambda p, q, r: p == "/status" and "exit" in q and r is None)),
                          launch_args=launch_args)
    start = time.monotonic()
    with pytest.raises(LaunchError, match="slot 0 .*could not start mpirun: .*(No closing quotation|/nonexistent)"):
        job.wait_ready(30)
    assert time.monotonic() - start < 10
    with pytest.raises(LaunchError):
        job.call(_rank, timeout=5)
    assert job.stop(5) is True


def test_bad_deadlines_are_refused_by_name():
    job = SlotJob(1, "127.0.0.1", log=io.StringIO())
    for bad in (0, -1, float("inf"), float("nan"), "5", True):
        with pytest.raises(ValueError, match=r"timeout=.*positive, finite"):
            job.call(_rank, timeout=bad)
        with pytest.raises(ValueError, match=r"timeout=.*positive, finite"):
            job.wait_ready(bad)
        with pytest.raises(ValueError, match=r"timeout=.*positive, finite"):
            job.stop(bad)
    with pytest.raises(RuntimeError, match="call wait_ready"):
        job.call(_rank, timeout=1)
    job.close()
