"""A killed launch's Open MPI session directory (<tmp>/ompi.<pid>) fails the next mpirun that gets its pid ("The PMIx
server's listener thread failed to start": PMIx's rendezvous file is created with O_EXCL). Two red CI runs came from
it. Here the pids the next processes will get are poisoned the way a SIGKILLed mpirun leaves them, in a private tmp
directory: raw mpirun fails there, tfringrun's supervisor removes the stale directories and starts at once."""
import io
import os
import socket
import subprocess
import sys
import time

import pytest

from tfring.runner.stale_sessions import GRACE_SECONDS, remove_stale
from tfring.runner.supervise import TRANSIENT_START_FAILURE, run_command

MPIRUN = [os.path.join(os.path.dirname(sys.executable), "mpirun"), "--allow-run-as-root", "-np", "1", "true"]


def next_pids(count):
    """The next `count` pids the kernel will hand out (sequential, wrapping at pid_max to 300), from a probe's."""
    probe = subprocess.Popen(["true"])
    probe.wait()
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    return [pid if pid < pid_max else 300 + pid - pid_max for pid in range(probe.pid + 1, probe.pid + 1 + count)]


def poison(base, count=3000):
    """Stale session directories, as a killed mpirun leaves them, for the next `count` pids (other tests running
    beside this one take pids too)."""
    old = time.time() - 10 * GRACE_SECONDS
    host = socket.gethostname()
    for pid in next_pids(count):
        path = base / ("ompi.%d" % pid)
        path.mkdir(exist_ok=True)
        for name in {host, host.split(".")[0]}:
            for suffix in ("", ".%d" % pid):
                (path / ("pmix.%s.tool%s" % (name, suffix))).write_text("stale\n")
        os.utime(path, (old, old))


@pytest.mark.slow
def test_stale_session_directories_fail_raw_mpirun_and_not_tfringrun(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    poison(tmp_path)
    raw = subprocess.run(MPIRUN, env=env, capture_output=True, text=True, timeout=120)
    assert raw.returncode != 0 and TRANSIENT_START_FAILURE in raw.stdout + raw.stderr, raw

    out, err = io.StringIO(), io.StringIO()
    assert run_command(MPIRUN, env=env, stdout=out, stderr=err) == 0, err.getvalue()
    assert "starting the job again" not in err.getvalue()


def test_only_dead_processes_old_directories_of_this_user_are_removed(tmp_path):
    probe = subprocess.Popen(["true"])
    probe.wait()
    dead, alive = probe.pid, os.getpid()
    old = time.time() - 10 * GRACE_SECONDS
    names = {"ompi.%d" % dead: True, "prted.%d" % dead: True, "prte.%d" % dead: True,
             "ompi.%d" % alive: False, "ompi.x%d" % dead: False, "other.%d" % dead: False}
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text("x")
        os.utime(tmp_path / name, (old, old))
    (tmp_path / ("ompi.%d" % (dead + 100000))).mkdir()  # dead too, but changed just now: perhaps being born
    (tmp_path / ("prted.%d" % (dead + 100001))).symlink_to(tmp_path / ("ompi.%d" % alive))
    removed = remove_stale({"TMPDIR": str(tmp_path)})
    assert sorted(removed) == sorted(str(tmp_path / n) for n, gone in names.items() if gone)
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {n for n, gone in names.items() if not gone} | {"ompi.%d" % (dead + 100000),
                                                                   "prted.%d" % (dead + 100001)}
    assert (tmp_path / ("ompi.%d" % alive) / "f").exists()
