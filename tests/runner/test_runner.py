"""tfringrun: flags, host parsing, output tagging, exit codes, signals, --check-build, run() API."""
import os
import re
import signal
import subprocess
import sys
import threading
import time
import tracemalloc

import pytest

from conftest import ROOT, rank_env
from runner_helpers import script, tfringrun
from tfring.runner.hosts import parse_hostfile, parse_hosts
from tfring.runner.launch import parse
from tfring.runner.mpirun import build_command
from tfring.runner.output import KEEP_LINES, Relay

pytestmark = pytest.mark.slow  # launches real ranks or jobs



def test_hosts_and_hostfile(tmp_path):
    assert parse_hosts("h1:2,h2") == [("h1", 2), ("h2", 1)]
    with pytest.raises(ValueError, match="bad entry 'h1:x'"):
        parse_hosts("h1:x")
    hf = tmp_path / "hosts"
    hf.write_text("# cluster\nnode1 slots=4\nnode2 slots=2  # comment\n")
    assert parse_hostfile(str(hf)) == [("node1", 4), ("node2", 2)]
    hf.write_text("node1 cpus=4\n")
    with pytest.raises(ValueError, match="cannot parse 'cpus=4'"):
        parse_hostfile(str(hf))


def test_command_for_root_oversubscription_and_remote_hosts():
    cmd = build_command(parse(["-np", "8", "python", "x.py"]))
    assert "--oversubscribe" in cmd and "--bind-to" in cmd and cmd[cmd.index("--host") + 1] == "localhost:8"
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    remote = build_command(parse(["-np", "2", "-H", "h1:1,h2:1", "-p", "2222", "-i", "/k",
                                  "--network-interface", "eth0", "python", "x.py"]))
    assert "oob_tcp_keepalive_time" in remote and "--oversubscribe" not in remote
    assert remote[remote.index("plm_ssh_args") + 1] == "-p 2222 -i /k"
    assert remote[remote.index("btl_tcp_if_include") + 1] == "eth0"


def test_unknown_and_unbuilt_flags_are_one_line_exit_2_from_the_command_line():
    """The real entry point (test_runner_flags.py covers every flag in-process)."""
    for argv, words in [(["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
                        (["-hostfile"], "argument -hostfile/--hostfile: expected one argument"),
                        (["--autotune", "--autotune-bayes-opt-max-samples", "-5"],
                         "--autotune-bayes-opt-max-samples: -5 must be >= 0"),
                        (["--gloo"], "--gloo: the Gloo controller is not built")]:
        proc = tfringrun(["-np", "2"] + argv + ["python", "x.py"] if argv != ["-hostfile"] else argv)
        assert proc.returncode == 2 and proc.stdout.count("\n") == 1 and words in proc.stdout, proc.stdout


def test_check_build_is_truthful():
    proc = tfringrun(["--check-build"])
    assert proc.returncode == 0, proc.stdout
    import tensorflow as tf
    assert "built for TensorFlow: %s" % tf.__version__ in proc.stdout
    assert "Open MPI v5" in proc.stdout and "NCCL: no" in proc.stdout and "CUDA: no" in proc.stdout
    for op in ("HorovodAllreduce", "HorovodAlltoall", "HorovodJoin", "HorovodReducescatter"):
        assert op in proc.stdout
    try:
        import jax
    except ImportError:
        assert "JAX: not built" in proc.stdout
    else:
        assert "JAX: built for jax %s (running %s), XLA FFI handlers registered" % (jax.__version__, jax.__version__) \
            in proc.stdout, proc.stdout


def test_output_is_tagged_by_rank_in_whole_lines_and_logged_per_rank(tmp_path):
    job = script(tmp_path, """
        import sys
        from mpi4py import MPI
        r = MPI.COMM_WORLD.rank
        for i in range(300):
            sys.stdout.write("rank%d-line%d-" % (r, i) + "x" * 500 + "-end\\n")
        sys.stdout.flush()
    """)
    logs = tmp_path / "logs"
    proc = tfringrun(["-np", "3", "--output-filename", str(logs), "python", job])
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if "-line" in ln]
    assert len(lines) == 900
    for line in lines:
        rank = line[1]
        assert line.startswith("[%s]<stdout>:rank%s-line" % (rank, rank)) and line.endswith("x-end"), line[:80]
    for r in range(3):
        own = (logs / ("rank.%d.log" % r)).read_text().splitlines()
        assert len(own) == 300 and all(ln.startswith("[%d]<stdout>:rank%d-" % (r, r)) for ln in own)


def test_carriage_return_updates_keep_their_rank_tag_and_reach_the_rank_log(tmp_path):
    """Keras verbose=1 writes backspaces, then '\\r', then the bar: every update must carry its rank's tag,
    on the terminal and in rank.N.log, and stay a '\\r' update (not become a new line)."""
    job = script(tmp_path, """
        import sys, time
        from mpi4py import MPI
        r = MPI.COMM_WORLD.rank
        for i in range(5):
            sys.stdout.write("\\b" * 20 + "\\r" + "progress r%d step %d/5" % (r, i))
            sys.stdout.flush()
            time.sleep(0.05)
        sys.stdout.write(" done\\n")
    """)
    logs = tmp_path / "logs"
    proc = subprocess.run([sys.executable, "-m", "tfring.runner", "-np", "2", "--output-filename", str(logs),
                           "python", job], cwd=ROOT, env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        for where, data in (("stdout", proc.stdout), ("log", (logs / ("rank.%d.log" % r)).read_bytes())):
            pieces = [p for p in re.split(rb"[\r\n]", data) if b"progress r%d" % r in p]
            assert len(pieces) == 5, (where, data[-2000:])
            assert all(p.startswith(b"[%d]<stdout>:progress r%d step" % (r, r)) for p in pieces), (where, pieces)
            assert b"\r[%d]<stdout>:progress r%d step 4/5 done\n" % (r, r) in data, (where, data[-2000:])


def test_prefix_timestamp_and_log_timestamp(tmp_path):
    job = script(tmp_path, """
        import sys
        from mpi4py import MPI
        r = MPI.COMM_WORLD.rank
        print("line-a r%d" % r, flush=True)
        sys.stderr.write("[tfring WARNING rank %d] backend says hi\\n" % r)
        sys.stderr.flush()
    """)
    when = r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}"
    proc = tfringrun(["-np", "2", "-prefix-timestamp", "python", job], timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for r in range(2):
        assert re.search(r"(?m)^%s\[%d\]<stdout>:line-a r%d$" % (when, r, r), proc.stdout), proc.stdout
        assert re.search(r"(?m)^%s\[%d\]<stderr>:\[tfring WARNING" % (when, r), proc.stdout), proc.stdout
    proc = tfringrun(["-np", "2", "--log-with-timestamp", "python", job], timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for r in range(2):  # only tfring's own log lines get a time
        assert re.search(r"(?m)^\[%d\]<stdout>:line-a r%d$" % (r, r), proc.stdout), proc.stdout
        assert re.search(r"(?m)^%s\[%d\]<stderr>:\[tfring WARNING" % (when, r), proc.stdout), proc.stdout


def test_relay_memory_does_not_grow_with_output(tmp_path):
    """50 MB on one line, then far more of mpirun's own lines than are kept: the relay streams both."""
    read_end, write_end = os.pipe()

    def writer():
        with os.fdopen(write_end, "wb") as f:
            f.write(b"[1,0]<stdout>: ")
            block = b"x" * (1 << 20)
            for _ in range(50):
                f.write(block)
            f.write(b"\n")
            for i in range(20000):
                f.write(b"mpirun says %d\n" % i)

    class Sink:
        n = 0
        buffer = property(lambda self: self)

        def write(self, data):
            self.n += len(data)

        def flush(self):
            pass

    sink, relay = Sink(), Relay(str(tmp_path / "logs"))
    t = threading.Thread(target=writer)
    tracemalloc.start()
    try:
        t.start()
        with os.fdopen(read_end, "rb", buffering=0) as stream:
            relay.pump(stream, sink)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        t.join()
    relay.close()
    untagged = sum(len(b"mpirun says %d\n" % i) for i in range(20000))
    assert sink.n == len(b"[0]<stdout>:") + (50 << 20) + 1 + untagged
    assert (tmp_path / "logs" / "rank.0.log").stat().st_size == len(b"[0]<stdout>:") + (50 << 20) + 1
    assert len(relay.untagged) == KEEP_LINES and relay.untagged[-1] == "mpirun says 19999\n"
    assert peak < 4 << 20, "relay peaked at %.1f MB" % (peak / 2 ** 20)


def test_flags_reach_the_ranks(tmp_path):
    """A real job: knobs from flags and a config file, --mpi-threads-disable and the user's variables."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("params: {fusion_threshold_mb: 2, cycle_time_ms: 9}\n")
    job = script(tmp_path, """
        import os
        import tensorflow as tf, tfring as hvd
        hvd.init()
        v = hvd.allreduce(tf.constant(1.0), op=hvd.Sum)
        print("GOT", hvd.rank(), hvd.mpi_threads_supported(), hvd.tunables(), float(v), os.environ["MY_VAR"],
              flush=True)
    """)
    env = dict(rank_env(), MY_VAR="a b")
    proc = subprocess.run([sys.executable, "-m", "tfring.runner", "-np", "2", "--config-file", str(cfg),
                           "--cycle-time-ms", "3", "--mpi-threads-disable", "python", job], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for r in range(2):
        assert "[%d]<stdout>:GOT %d False (2097152, 3.0) 2.0 a b" % (r, r) in proc.stdout, proc.stdout[-3000:]


def test_start_timeout_ends_a_job_whose_ranks_never_start(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text("#!/bin/sh\nsleep 120\n")  # a host that never answers
    (fake / "ssh").chmod(0o755)
    env = dict(rank_env(), PATH=str(fake) + os.pathsep + os.environ["PATH"])
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "tfring.runner", "-np", "2", "-H", "localhost:1,deadhost:1",
                           "--start-timeout", "3", "python", "-c", "pass"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert time.time() - start < 30, proc.stdout[-3000:]
    assert proc.returncode != 0 and "of 2 did not start within 3 s (--start-timeout)" in proc.stdout, \
        proc.stdout[-3000:]
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", str(fake / "ssh")], stdout=subprocess.PIPE, text=True).stdout.split()
    assert left == [], "the stuck ssh outlived the job: %s" % left
    logs = tmp_path / "logs"
    proc = tfringrun(["-np", "2", "--start-timeout", "60", "--output-filename", str(logs), "python", "-c",
                      "print('hi')"], timeout=120)
    assert proc.returncode == 0 and proc.stdout.count("<stdout>:hi\n") == 2, proc.stdout
    assert "rank-started" not in proc.stdout + (logs / "rank.0.log").read_text()  # the start marker is swallowed


DYING_JOB = """
    import mpi4py
    mpi4py.rc.finalize = False  # an exiting rank must not wait in MPI_Finalize for the others
    import os, signal, sys, time
    import tensorflow as tf, tfring as hvd
    hvd.init()
    mode, marker = sys.argv[1], sys.argv[2]
    for i in range(20):
        hvd.allreduce(tf.ones([100]), name="step")
    if hvd.rank() == 1:
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "exit3":
            hvd.shutdown()  # what sys.exit does first (atexit); here rank 0 can report it before we exit
        deadline = time.time() + 60  # exit once rank 0 is out of collectives, waiting to be stopped
        while not os.path.exists(marker) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # rank 0's report reaches mpirun before our exit ends the job
        if mode == "exit3":
            sys.exit(3)
        os._exit(0)
    try:
        while mode != "osexit":
            hvd.allreduce(tf.ones([100]), name="step")
    except tf.errors.OpError as e:
        print("rank 0:", e, flush=True)
    open(marker, "w").close()
    time.sleep(120)  # never exits by itself: rank 1's end is the job's only failure, whatever the timing
"""


@pytest.mark.parametrize("mode,code,summary", [
    # Rank 0 reports the shutdown its next collective saw, then waits: mpirun stops it when rank 1 exits.
    ("exit3", 3, r"rank 1 exited with code 3; the job was stopped \(tfring had been shut down by rank 1: it "
                 r"exited or called shutdown\(\) first\)"),
    ("kill", 137, r"rank 1 on host \S+ was killed by signal 9 \(Killed\); the job was stopped"),
    # Rank 1 dies without MPI_Finalize while rank 0 waits outside any collective (no MPI error can race).
    ("osexit", 1, r"rank 1 on host \S+ exited without finalizing \(it died mid-job\); the job was stopped"),
], ids=["exit3", "kill", "osexit"])
def test_a_dying_rank_ends_the_job_naming_it(tmp_path, mode, code, summary):
    job = script(tmp_path, DYING_JOB)
    start = time.time()
    proc = tfringrun(["-np", "2", "python", job, mode, str(tmp_path / "rank0-waiting")], timeout=120)
    assert time.time() - start < 60, proc.stdout[-3000:]  # includes ~10 s of TensorFlow start-up on two cores
    assert proc.returncode == code, proc.stdout[-3000:]
    assert re.search(r"(?m)^tfringrun: %s\n\Z" % summary, proc.stdout), proc.stdout[-3000:]


class Launched:
    """tfringrun in the background, its output collected by a thread, so that every wait has a deadline."""

    def __init__(self, args, env=None):
        self.proc = subprocess.Popen([sys.executable, "-m", "tfring.runner"] + args, cwd=ROOT, env=env or rank_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def out(self):
        return "".join(self.lines)

    def wait_for(self, done, what, timeout=60):
        deadline = time.time() + timeout
        while not done():
            assert time.time() < deadline and self.proc.poll() is None, "%s: %s" % (what, self.out()[-3000:])
            time.sleep(0.05)

    def terminate(self, timeout=60):
        """SIGTERM; returns (exit code, seconds until the launcher exited)."""
        start = time.time()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_tree()
            raise AssertionError("tfringrun still running %d s after SIGTERM: %s" % (timeout, self.out()[-3000:]))
        elapsed = time.time() - start
        self.reader.join(timeout=10)
        return rc, elapsed

    def kill_tree(self):
        """Clean-up of a launcher that outlived its test: SIGKILL it and everything below it."""
        from tfring.runner.processes import descendants
        for pid in descendants(self.proc.pid) + [self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)


def test_sigterm_stops_every_rank_even_one_that_traps_it(tmp_path):
    marker = "tfring-sigterm-%d" % os.getpid()
    # Rank 1 ignores SIGTERM (SIG_IGN: the kernel drops it, so it survives however busy the machine is; a Python
    # handler may not even have run before the SIGKILL that follows): only a SIGKILL ends it.
    path = script(tmp_path, """
        import signal, time
        from mpi4py import MPI
        r = MPI.COMM_WORLD.rank
        if r == 1:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", r, flush=True)
        time.sleep(600)
    """, name=marker + ".py")
    job = Launched(["-np", "2", "python", path])
    try:
        job.wait_for(lambda: job.out().count("ready") == 2, "the ranks did not start")
        rc, elapsed = job.terminate(timeout=30)
    finally:
        if job.proc.poll() is None:
            job.kill_tree()
    assert rc == 128 + signal.SIGTERM and job.out().endswith("tfringrun: stopped by signal 15\n"), job.out()[-3000:]
    assert elapsed < 15, elapsed  # mpirun itself follows its SIGTERM with a SIGKILL (well within tfringrun's 5 s)
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], stdout=subprocess.PIPE, text=True).stdout.split()
    assert left == [], "orphan processes: %s" % left


def test_an_mpirun_lingering_after_every_rank_reported_is_ended_as_a_failure_not_a_crash(monkeypatch):
    # An elastic job's mpirun can wait forever for a daemon behind a cut link after the ranks are done: tfringrun
    # ends it FINISHED_GRACE s after the last exit report, and the code it returns is not "died of a signal" (the
    # elastic driver restarts a job whose mpirun crashed).
    import io
    from tfring.runner import supervise
    monkeypatch.setattr(supervise, "FINISHED_GRACE", 1)
    reported = []
    launcher = supervise.Mpirun([sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ), Relay(),
                                0, 0)
    threading.Timer(0.5, reported.append, args=(True,)).start()
    err = io.StringIO()
    start = time.time()
    rc = launcher.wait(io.StringIO(), err, done=lambda: bool(reported))
    assert rc == 128 + signal.SIGTERM and launcher.ended, rc
    assert 1.5 < time.time() - start < 10
    assert "every rank reported its exit %d s ago, but mpirun has not ended: ending it" % supervise.FINISHED_GRACE \
        in err.getvalue()


def test_killing_a_session_takes_the_sessions_its_processes_started():
    # tfringrun starts mpirun in a session of its own: a harness killing a hung tfringrun's session must take
    # mpirun and its ranks too, or they run on orphaned and slow whatever runs next.
    from tfring.runner.processes import alive, kill_session
    outer = subprocess.Popen([sys.executable, "-c", """
import subprocess, sys, time
inner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print(inner.pid, flush=True)
time.sleep(600)
"""], stdout=subprocess.PIPE, text=True, start_new_session=True)
    inner = int(outer.stdout.readline())
    assert os.getsid(inner) == inner != outer.pid
    kill_session(outer.pid)
    assert outer.wait(timeout=10) == -signal.SIGKILL
    deadline = time.time() + 10
    while alive(inner) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(inner), "the inner session's process survived"


def test_sigterm_escalates_to_sigkill_when_mpirun_ignores_it(tmp_path):
    """mpirun waiting on a stuck ssh ignores SIGTERM: tfringrun SIGKILLs it and its ssh 5 s later."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text("#!/bin/sh\nsleep 120\n")  # a host that never answers
    (fake / "ssh").chmod(0o755)

    def stuck_ssh():
        return subprocess.run(["pgrep", "-f", str(fake / "ssh")], stdout=subprocess.PIPE, text=True).stdout.split()
    job = Launched(["-np", "2", "-H", "localhost:1,deadhost:1", "python", "-c", "pass"],
                   env=dict(rank_env(), PATH=str(fake) + os.pathsep + os.environ["PATH"]))
    try:
        job.wait_for(stuck_ssh, "mpirun never started ssh")
        time.sleep(1)  # mpirun is now waiting on it
        rc, elapsed = job.terminate(timeout=60)  # mpirun alone would wait for the ssh: 120 s
    finally:
        if job.proc.poll() is None:
            job.kill_tree()
    assert rc == 128 + signal.SIGTERM and job.out().endswith("tfringrun: stopped by signal 15\n"), job.out()[-3000:]
    assert 4 <= elapsed <= 15, elapsed  # documented: SIGKILL 5 s after the SIGTERM (margins for a busy machine)
    time.sleep(0.5)
    assert stuck_ssh() == [], "the stuck ssh outlived the job"


def square_of_rank(offset):
    import tfring as hvd
    import tensorflow as tf
    hvd.init()
    total = int(hvd.allreduce(tf.constant(hvd.rank() + 1), op=hvd.Sum))
    return hvd.rank() ** 2 + offset, total


def test_run_api_returns_results_in_rank_order():
    from tfring.runner import run
    # The ranks import this test module (and its conftest) by name: cloudpickle pickles module functions by reference.
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join(p for p in [here, os.path.dirname(here), os.environ.get("PYTHONPATH", "")] if p)
    results = run(square_of_rank, args=(10,), np=3, env={"PYTHONPATH": path})
    assert results == [(10, 6), (11, 6), (14, 6)]


def test_run_api_ships_closures_both_ways():
    # Plain pickle refuses a lambda (by reference) both as the function and as a rank's result.
    from tfring.runner import run
    base = 7
    results = run(lambda k: (lambda x: x * k + base), args=(3,), np=2)
    assert [f(2) for f in results] == [13, 13]
