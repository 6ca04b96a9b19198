"""The ranks' exit reports (tfring/runner/elastic/exits.py) and how tfringrun uses them when mpirun dies after the
ranks (tfring/runner/supervise.run_command's `finished`); the end-to-end case is
tests/hosts/test_multihost_elastic.py."""
import functools
import io
import os
import subprocess
import sys

import pytest

from tfring.common.signed_channel import BadRequest, ProtocolError, client_from_env, new_secret
from tfring.common.signed_server import DriverServer
from tfring.runner.elastic import driver as ed
from tfring.runner.elastic.exits import ExitLedger
from tfring.runner.supervise import run_command


def test_ledger_needs_every_rank_of_one_world_and_no_failure():
    ledger = ExitLedger()
    assert ledger.finished_size() is None
    ledger.record({"rank": 1, "size": 3, "code": 0})
    ledger.record({"rank": 0, "size": 3, "code": 0})
    assert ledger.finished_size() is None  # rank 2 has not reported
    ledger.record({"rank": 2, "size": 3, "code": 0})
    assert ledger.finished_size() == 3
    ledger.record({"rank": 0, "size": 2, "code": 1})  # any failure, even from another world, spoils it
    assert ledger.finished_size() is None
    ledger.clear()
    for rank in range(2):  # a rank that left the bigger world early (code 0) does not stand for the others
        ledger.record({"rank": rank, "size": 2, "code": 0})
    ledger.record({"rank": 3, "size": 4, "code": 0})
    assert ledger.finished_size() == 2


@pytest.mark.parametrize("payload, why", [
    ({"rank": 0, "size": 2}, "must be integers"),
    ({"rank": "0", "size": 2, "code": 0}, "must be integers"),
    ({"rank": True, "size": 2, "code": 0}, "must be integers"),
    ({"rank": 2, "size": 2, "code": 0}, "'rank' 2 is outside [0, 'size' 2)"),
    ({"rank": -1, "size": 2, "code": 0}, "'rank' -1 is outside"),
])
def test_ledger_refuses_bad_reports(payload, why):
    ledger = ExitLedger()
    with pytest.raises(BadRequest, match=why.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        ledger.record(payload)
    assert ledger.finished_size() is None


def _command(code):
    return [sys.executable, "-c", "import sys; print('rank output'); sys.exit(%d)" % code]


def test_failed_mpirun_after_every_rank_reported_success_is_a_success():
    ledger = ExitLedger()
    for rank in range(3):
        ledger.record({"rank": rank, "size": 3, "code": 0})
    out, err = io.StringIO(), io.StringIO()
    rc = run_command(_command(7), stdout=out, stderr=err, finished=functools.partial(ed._finished, ledger))
    assert rc == 0
    assert out.getvalue() == "rank output\n"
    assert err.getvalue().startswith("tfringrun: every rank of the final 3 reported success, but mpirun ended "
                                     "with exit code 7 after them"), err.getvalue()
    assert "job failed" not in err.getvalue()


def test_failed_mpirun_without_every_rank_stays_a_failure():
    ledger = ExitLedger()
    ledger.record({"rank": 0, "size": 2, "code": 0})
    err = io.StringIO()
    rc = run_command(_command(7), stdout=io.StringIO(), stderr=err, finished=functools.partial(ed._finished, ledger))
    assert rc == 7 and "the job failed (exit code 7)" in err.getvalue() and "reported success" not in err.getvalue()
    ledger.record({"rank": 1, "size": 2, "code": 2})
    assert ed._finished(ledger, 7) is None
    assert run_command(_command(0), stdout=io.StringIO(), stderr=io.StringIO(),
                       finished=lambda rc: pytest.fail("asked about a successful run")) == 0


def test_exit_reports_are_signed_requests_to_the_driver():
    ledger, secret = ExitLedger(), new_secret()
    server = DriverServer("127.0.0.1", secret, {"/exit": ledger.record}, log=io.StringIO())
    server.start()
    try:
        env = {"TFRING_ELASTIC_DRIVER": server.address, "TFRING_ELASTIC_SECRET": secret, "PATH": os.environ["PATH"]}
        client = client_from_env(env)
        assert client.call("/exit", {"rank": 0, "size": 1, "code": 0}) == {"ok": True}
        with pytest.raises(ProtocolError, match="400"):
            client.call("/exit", {"rank": 1, "size": 1, "code": 0})
        forged = client_from_env(dict(env, TFRING_ELASTIC_SECRET=new_secret()))
        with pytest.raises(ProtocolError):
            forged.call("/exit", {"rank": 0, "size": 1, "code": 3})
        assert ledger.finished_size() == 1  # the forged failure was not recorded
    finally:
        server.stop()


def test_a_reset_step_past_its_deadline_says_what_hung_and_where_then_exits_1():
    # world._Deadline's expiry (a reset's MPI step that never returns, e.g. the survivors' first MPI_Comm_dup): the
    # message, then every thread's Python stack (the next such hang names its call), then exit status 1.
    code = ("from tfring.common.elastic.world import _Deadline\n"
            "def stuck_in_the_dup():\n    _Deadline('starting tfring on the new communicator', 5).expire()\n"
            "stuck_in_the_dup()")
    proc = subprocess.run([sys.executable, "-P", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120, cwd="/")
    assert proc.returncode == 1, proc.stdout
    assert "tfring.elastic: starting tfring on the new communicator did not finish within 60 s" in proc.stdout
    assert "in stuck_in_the_dup" in proc.stdout and "Current thread" in proc.stdout, proc.stdout
