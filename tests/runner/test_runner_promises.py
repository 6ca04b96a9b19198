"""tfringrun and tfring.runner.run(): README/docs promises no other test checked (issue #18 item 10). Every tfringrun
flag that sets a knob reaches the ranks and takes effect there, --hostfile end to end, the documented one-line
errors, a failed rank's exit code, Ctrl-C (SIGINT), and run() with a failing rank or hosts=. Jobs that need no
TensorFlow use mpi4py only (fast)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, rank_env
from runner_helpers import script, tfringrun

pytestmark = pytest.mark.slow  # launches real ranks or jobs



def test_knob_flags_reach_every_rank_and_take_effect(tmp_path):
    """One job with every knob flag: each rank sees the variables, the runtime runs with them (tunables, the
    timeline with cycle marks and no response-cache hits, the debug log line); --tcp reaches mpirun.
    (--network-interface: test_runner_horovod_compat.py on one host, test_multihost.py across hosts.)"""
    timeline, tune_log = tmp_path / "timeline.json", tmp_path / "tune.csv"
    job = script(tmp_path, """
        import json, os
        import tensorflow as tf, tfring as hvd
        hvd.init()
        for _ in range(3):
            hvd.allreduce(tf.ones([2]), name="flagged")
        knobs = {k: v for k, v in os.environ.items() if k.startswith("TFRING_") or k == "NCCL_IB_DISABLE"}
        print("KNOBS", hvd.rank(), json.dumps(knobs, sort_keys=True), hvd.tunables(), flush=True)
    """)
    proc = tfringrun(["-np", "2", "--fusion-threshold-mb", "3", "--cycle-time-ms", "4", "--cache-capacity", "0",
                      "--timeline-filename", str(timeline), "--timeline-mark-cycles", "--no-stall-check",
                      "--stall-check-warning-time-seconds", "7", "--stall-check-shutdown-time-seconds", "9",
                      "--log-level", "DEBUG", "--no-autotune", "--autotune-log-file", str(tune_log),
                      "--autotune-warmup-samples", "2", "--autotune-sample-seconds", "0.5",
                      "--autotune-samples-per-candidate", "2", "--tcp", "--verbose",
                      "python", job])
    assert proc.returncode == 0, proc.stdout[-5000:]
    want = {"TFRING_FUSION_THRESHOLD": str(3 << 20), "TFRING_CYCLE_TIME": "4.0", "TFRING_CACHE_CAPACITY": "0",
            "TFRING_TIMELINE": str(timeline), "TFRING_TIMELINE_MARK_CYCLES": "1", "TFRING_STALL_CHECK_DISABLE": "1",
            "TFRING_STALL_CHECK_TIME_SECONDS": "7.0", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "9.0",
            "TFRING_LOG_LEVEL": "debug", "TFRING_AUTOTUNE": "0", "TFRING_AUTOTUNE_LOG": str(tune_log),
            "TFRING_AUTOTUNE_WARMUP_SAMPLES": "2", "TFRING_AUTOTUNE_SAMPLE_SECONDS": "0.5",
            "TFRING_AUTOTUNE_SAMPLES_PER_CANDIDATE": "2", "NCCL_IB_DISABLE": "1"}
    for r in range(2):
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("[%d]<stdout>:KNOBS %d " % (r, r))]
        assert len(line) == 1, proc.stdout[-5000:]
        seen, tunables = line[0].split(" ", 2)[2].split("} ", 1)
        got = json.loads(seen + "}")
        assert {k: got.get(k) for k in want} == want, got
        assert tunables == "(%d, 4.0)" % (3 << 20)
        # The runtime read them (every rank logs its settings at debug level).
        assert "[%d]<stderr>:[tfring DEBUG rank %d] initialized: size 2, fusion %d B, cycle 4 ms" % (r, r, 3 << 20) \
            in proc.stdout, proc.stdout[-5000:]
    command = [ln for ln in proc.stdout.splitlines() if ln.startswith("tfringrun: ")]
    assert command and "--mca pml ob1 --mca btl tcp,sm,self" in command[0], command  # --tcp
    events = json.loads(timeline.read_text())  # rank 0 wrote a complete timeline
    assert any(e.get("name") == "CYCLE_START" for e in events)
    paths = [e["args"]["path"] for e in events if "path" in e.get("args", {})]
    assert len(paths) >= 3 and set(paths) == {"coordinator"}, paths  # --cache-capacity 0: no cache hits


def test_hostfile_end_to_end(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the whole cluster\nlocalhost slots=3  # three ranks here\n")
    job = script(tmp_path, """
        from mpi4py import MPI
        print("WORLD", MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size, flush=True)
    """)
    proc = tfringrun(["--hostfile", str(hostfile), "python", job], timeout=120)  # -np: the slots
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert sorted(ln for ln in proc.stdout.splitlines() if "WORLD" in ln) == [
        "[%d]<stdout>:WORLD %d 3" % (r, r) for r in range(3)], proc.stdout[-3000:]
    proc = tfringrun(["-np", "2", "-hostfile", str(hostfile), "python", job], timeout=120)  # fewer than the slots
    assert proc.returncode == 0 and proc.stdout.count("WORLD") == 2, proc.stdout[-3000:]


BAD_HOSTFILE = "node1 cpus=4\n"


@pytest.mark.parametrize("argv,words", [
    # docs/troubleshooting.md, tfringrun table; README: "one line (`tfringrun: ...`) and exit code 2".
    (["-np", "0", "python", "x.py"], "-np: must be a positive number of processes, got 0"),
    (["-np", "2"], "no command to run"),
    (["-H", "h1:x", "python", "x.py"], "-H/--hosts: bad entry 'h1:x'"),
    (["--hostfile", "{tmp}/bad_hosts", "python", "x.py"], "--hostfile {tmp}/bad_hosts:1: cannot parse 'cpus=4'"),
    (["--hostfile", "{tmp}/missing", "python", "x.py"], "--hostfile {tmp}/missing: cannot read it"),
    (["-np", "2", "--config-file", "{tmp}/bad.yaml", "python", "x.py"],
     "--config-file {tmp}/bad.yaml: unknown key 'parameters'"),
    (["-np", "2", "--torus-allreduce", "python", "x.py"],
     "--torus-allreduce: torus allreduce is not built in tfring (it runs a ring allreduce)"),
    (["-np", "2", "--min-np", "3", "python", "x.py"], "-np: 2 is below --min-np 3"),
    (["-np", "2", "--gloo", "python", "x.py"],
     "--gloo: the Gloo controller is not built in tfring (it runs on MPI); drop it or pass --mpi"),
    (["-H", "localhost:1", "--hostfile", "{tmp}/bad_hosts", "python", "x.py"],
     "argument -hostfile/--hostfile: not allowed with argument -H/--hosts"),
])
def test_documented_launcher_errors_are_one_line_exit_2(tmp_path, argv, words):
    (tmp_path / "bad_hosts").write_text(BAD_HOSTFILE)
    (tmp_path / "bad.yaml").write_text("parameters:\n  cycle_time_ms: 3\n")
    proc = tfringrun([a.replace("{tmp}", str(tmp_path)) for a in argv], timeout=60)
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout.startswith("tfringrun: ") and proc.stdout.count("\n") == 1, proc.stdout  # no usage, traceback
    assert words.replace("{tmp}", str(tmp_path)) in proc.stdout, proc.stdout


FAILING_RANK = """
    import os, sys, time
    from mpi4py import MPI
    if MPI.COMM_WORLD.rank == 1:
        if sys.argv[1] == "finalized":
            sys.exit(7)  # mpi4py finalizes MPI at exit
        os._exit(7)
    time.sleep(int(sys.argv[2]))
"""


def test_a_failed_rank_sets_the_exit_code_and_is_named(tmp_path):
    job = script(tmp_path, FAILING_RANK)
    start = time.time()
    proc = tfringrun(["-np", "2", "python", job, "unfinalized", "60"], timeout=120)
    assert time.time() - start < 40, proc.stdout[-3000:]  # rank 0 was stopped (60 s otherwise)
    assert proc.returncode == 7, proc.stdout[-3000:]  # "tfringrun exits with C"
    assert "tfringrun: rank 1" in proc.stdout and "exited with code 7; the job was stopped" in proc.stdout, \
        proc.stdout[-3000:]
    proc = tfringrun(["-np", "2", "python", job, "finalized", "3"], timeout=120)
    assert proc.returncode == 7 and "tfringrun: rank 1 exited with code 7" in proc.stdout, proc.stdout[-3000:]


def test_sigint_stops_every_rank_even_one_ignoring_sigterm(tmp_path):
    """Ctrl-C: every rank gets SIGTERM, SIGKILL after 5 s (rank 1 ignores SIGTERM); exit 128 + 2, one line."""
    marker = "tfring-sigint-%d" % os.getpid()
    job = script(tmp_path, """
        import signal, time
        from mpi4py import MPI
        if MPI.COMM_WORLD.rank == 1:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", MPI.COMM_WORLD.rank, flush=True)
        time.sleep(600)
    """, name=marker + ".py")
    proc = subprocess.Popen([sys.executable, "-m", "tfring.runner", "-np", "2", "python", job], cwd=ROOT,
                            env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen, deadline, lines = 0, time.time() + 120, []
        while seen < 2 and time.time() < deadline:
            lines.append(proc.stdout.readline())
            assert lines[-1], "job ended early:\n" + "".join(lines)
            seen += "<stdout>:ready" in lines[-1]
        assert seen == 2
        start = time.time()
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        took = time.time() - start
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, rest
    assert "tfringrun: stopped by signal 2" in rest, rest
    assert took < 20, took  # SIGTERM, then SIGKILL after 5 s
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], stdout=subprocess.PIPE, text=True).stdout.split()
    assert left == [], "ranks outlived Ctrl-C: %s" % left


def test_run_api_names_the_rank_that_failed():
    from tfring.runner import run

    def fails_on_rank_1(word):
        from mpi4py import MPI
        if MPI.COMM_WORLD.rank == 1:
            raise ValueError("%s on rank 1" % word)
        return "fine"
    with pytest.raises(RuntimeError, match=r"(?s)tfring.runner.run: rank 1 raised:\n.*ValueError: boom on rank 1"):
        run(fails_on_rank_1, args=("boom",), np=2)

    def dies_on_rank_1():
        import os
        from mpi4py import MPI
        if MPI.COMM_WORLD.rank == 1:
            os._exit(3)  # no result, no traceback
        return "fine"
    with pytest.raises(RuntimeError, match=r"tfring.runner.run: rank 1 returned no result \(launcher exit code 3\)"):
        run(dies_on_rank_1, np=2)


def test_run_api_with_hosts():
    from tfring.runner import run

    def where():
        from mpi4py import MPI
        return MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size, os.environ.get("MY_RUN_VAR")
    assert run(where, np=2, hosts="localhost:2", env={"MY_RUN_VAR": "x"}) == [(0, 2, "x"), (1, 2, "x")]
    with pytest.raises(ValueError, match="tfring.runner.run: -H/--hosts: bad entry 'localhost:x'"):
        run(where, np=2, hosts="localhost:x")
