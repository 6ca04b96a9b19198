"""tfringrun (and a Spark/Ray job's slot 0) starts mpirun once more when Open MPI failed at start-up before any rank
ran (the PMIx listener failure that made a CI run red), and only then. The "mpirun" here is a shell script that
prints what Open MPI prints (the supervisor reads nothing else); no MPI is needed."""
import io
import os
import sys
import threading

import pytest

from tfring.runner.supervise import TRANSIENT_START_FAILURE, run_command

PMIX_FAILURE = "-" * 74 + "\n" + TRANSIENT_START_FAILURE + ". We cannot\ncontinue.\n" + "-" * 74 + "\n"


def launcher(tmp_path, first, then="echo '[1,0]<stdout>:trained'; exit 0"):
    """A command that runs `first` on its first start and `then` on the next ones (a counter file); in both,
    $PMIX is a file holding Open MPI's message."""
    (tmp_path / "pmix").write_text(PMIX_FAILURE)
    first, then = (c.replace("$PMIX", str(tmp_path / "pmix")) for c in (first, then))
    count = tmp_path / "starts"
    count.write_text("")
    return ["/bin/sh", "-c", 'echo x >> %s; if [ "$(wc -l < %s)" = 1 ]; then %s; else %s; fi' % (
        count, count, first, then)], count


def run(cmd):
    out, err = io.StringIO(), io.StringIO()
    rc = run_command(cmd, stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


def test_pmix_start_failure_is_retried_once_and_said(tmp_path):
    cmd, count = launcher(tmp_path, "cat $PMIX >&2; exit 213")
    rc, out, err = run(cmd)
    assert rc == 0, err
    assert count.read_text().count("x") == 2
    assert "[0]<stdout>:trained" in out
    assert err.count("tfringrun: Open MPI failed before starting any rank") == 1, err


def test_a_second_start_failure_is_reported_not_retried_again(tmp_path):
    fail = "cat $PMIX >&2; exit 213"
    cmd, count = launcher(tmp_path, fail, then=fail)
    rc, _, err = run(cmd)
    assert rc == 213 and count.read_text().count("x") == 2, err
    assert err.rstrip().endswith("tfringrun: the job failed (exit code 213)"), err


def test_no_retry_once_a_rank_spoke_or_for_other_failures(tmp_path):
    # A rank wrote a line before the same message: the job ran (side effects), so it is not started again.
    cmd, count = launcher(tmp_path, "echo '[1,0]<stdout>:step 1'; cat $PMIX >&2; exit 213")
    rc, _, err = run(cmd)
    assert rc == 213 and count.read_text().count("x") == 1, err
    # Any other start-up failure is the user's to see at once.
    cmd, count = launcher(tmp_path, "echo 'prterun: executable not found' >&2; exit 1")
    rc, _, err = run(cmd)
    assert rc == 1 and count.read_text().count("x") == 1, err
    assert "starting the job again" not in err


class _Driver:  # the slot job's driver service, as slot 0's launcher reaches it: output and the exit report
    def __init__(self):
        self.output, self.exits, self.done = {"stdout": "", "stderr": ""}, [], threading.Event()

    def call(self, path, payload):
        if path == "/output":
            self.output[payload["stream"]] += payload["data"]
        else:
            self.exits.append((path, payload))
            self.done.set()
        return {"ack": True}


def slot_launch(cmd, start_deadline=0):
    """Slot 0's launcher (a Spark task's or Ray actor's) with `cmd` as its mpirun, to its exit report (within 60 s);
    returns the driver it reported to."""
    from types import SimpleNamespace
    from tfring.runner.slots.launcher import Launcher

    class Shell(Launcher):
        def command(self, spec, secret):  # the real one builds an mpirun command line from the driver's spec
            return cmd, dict(os.environ), SimpleNamespace(num_ranks=1, start_deadline=start_deadline, verbose=False)

    driver = _Driver()
    Shell(driver, spec=None, secret=None)
    assert driver.done.wait(60), driver.output
    return driver


def test_a_slot_jobs_start_failure_is_retried_once_and_said(tmp_path):
    # Spark and Ray jobs (tfring.runner.slots) start mpirun from slot 0, not through tfringrun's supervisor.
    # With a start deadline far away: the failed mpirun is seen when it exits, not at the deadline (the launcher
    # waited for the deadline first, and a Ray job's driver gave up at 120 s: a red CI run).
    cmd, count = launcher(tmp_path, "cat $PMIX >&2; exit 213")
    driver = slot_launch(cmd, start_deadline=600)
    assert driver.exits == [("/exit", {"rc": 0, "summary": "", "lost_host": None, "launch": 0})], driver.output
    assert count.read_text().count("x") == 2
    assert driver.output["stderr"].count("tfring: Open MPI failed before starting any rank") == 1, driver.output
    assert "[0]<stdout>:trained" in driver.output["stdout"]
    fail = "cat $PMIX >&2; exit 213"  # twice: reported, not started a third time
    cmd, count = launcher(tmp_path, fail, then=fail)
    driver = slot_launch(cmd)
    assert driver.exits[0][1]["rc"] == 213 and count.read_text().count("x") == 2, driver.exits
    cmd, count = launcher(tmp_path, "echo '[1,0]<stdout>:step 1'; cat $PMIX >&2; exit 213")  # a rank ran
    assert slot_launch(cmd).exits[0][1]["rc"] == 213 and count.read_text().count("x") == 1


@pytest.mark.slow  # a real 2-rank job
def test_real_job_through_tfringrun_is_not_started_twice(tmp_path):
    """End to end: a real 2-rank job that fails on its own is run once (its line appears once)."""
    import subprocess
    from conftest import ROOT, rank_env
    job = tmp_path / "job.py"
    job.write_text("from mpi4py import MPI\nprint('ran', MPI.COMM_WORLD.rank, flush=True)\nraise SystemExit(3)\n")
    proc = subprocess.run([sys.executable, "-m", "tfring.runner", "-np", "2", "python", str(job)], cwd=ROOT,
                          env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 3, proc.stdout
    assert proc.stdout.count("<stdout>:ran 0") == 1 and proc.stdout.count("<stdout>:ran 1") == 1, proc.stdout


def test_a_lost_host_is_named_from_either_of_prrtes_reports():
    """The elastic driver blacklists the host mpirun's report names; a daemon that never reported back (a restart
    after a cut link) is reported as "Remote host: H", not "on node H" (it was "unknown", and the restart looped)."""
    from tfring.runner.output import lost_host
    lost = ["ORTE has lost communication with a remote daemon.", "  HNP daemon   : [prterun-h1-1@0,0] on node h1",
            "  Remote daemon: [prterun-h1-1@0,1] on node h2"]
    never = ["A daemon failed to report back after being spawned. This could", "be due to several factors,",
             "  Local host:    h1", "  Remote host:   h2", "  Daemon exit status: 1"]
    assert lost_host(lost) == "h2" and lost_host(never) == "h2"
    assert lost_host(["rank 1 exited"]) is None
