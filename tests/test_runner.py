"""tfringrun: flags, host parsing, output tagging, exit codes, signals, --check-build, run() API."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import HERE, ROOT, rank_env
from tfring.runner.flags import apply_config_file, build_parser, knob_env, read_config_file
from tfring.runner.hosts import parse_hostfile, parse_hosts
from tfring.runner.launch import build_command


def tfringrun(args, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", "tfring.runner"] + args, cwd=ROOT, env=rank_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, **kw)


def script(tmp_path, body, name="job.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


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
    args = build_parser().parse_args(["-np", "8", "python", "x.py"])
    cmd = build_command(args)
    assert "--oversubscribe" in cmd and "--bind-to" in cmd and cmd[cmd.index("--host") + 1] == "localhost:8"
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    remote = build_command(build_parser().parse_args(["-np", "2", "-H", "h1:1,h2:1", "-p", "2222", "-i", "/k",
                                                      "--network-interface", "eth0", "python", "x.py"]))
    assert "oob_tcp_keepalive_time" in remote and "--oversubscribe" not in remote
    assert remote[remote.index("plm_ssh_args") + 1] == "-p 2222 -i /k"
    assert remote[remote.index("btl_tcp_if_include") + 1] == "eth0"


def test_flags_and_config_file_map_onto_the_knob_table(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("verbose: true\nparams:\n  fusion_threshold_mb: 32\n  cycle_time_ms: 2.5\n"
                   "stall_check:\n  warning_time_seconds: 30\n  enabled: true\nlogging:\n  level: debug\n")
    args = apply_config_file(build_parser().parse_args(["--config-file", str(cfg), "--cycle-time-ms", "7",
                                                        "--cache-capacity", "10", "python", "x.py"]))
    env = knob_env(args)
    assert env == {"TFRING_FUSION_THRESHOLD": str(32 * 1024 * 1024), "TFRING_CYCLE_TIME": "7.0",
                   "TFRING_CACHE_CAPACITY": "10", "TFRING_STALL_CHECK_TIME_SECONDS": "30",
                   "TFRING_LOG_LEVEL": "debug"}
    assert args.verbose
    assert knob_env(build_parser().parse_args(["--disable-cache", "--no-stall-check", "x"])) == {
        "TFRING_CACHE_CAPACITY": "0", "TFRING_STALL_CHECK_DISABLE": "1"}
    cfg.write_text("params:\n  fusion_threshold: 3\n")
    with pytest.raises(ValueError, match="unknown key 'fusion_threshold'"):
        read_config_file(str(cfg))


def test_unknown_unbuilt_and_gloo_flags_are_clear_errors():
    proc = tfringrun(["--no-such-flag", "-np", "2", "python", "x.py"])
    assert proc.returncode == 2 and "unrecognized arguments: --no-such-flag" in proc.stdout
    proc = tfringrun(["-np", "2", "--autotune", "--autotune-bayes-opt-max-samples", "5", "python", "x.py"])
    assert proc.returncode != 0 and "--autotune-bayes-opt-max-samples: Bayesian-optimisation autotune is not built" \
        in proc.stdout
    assert knob_env(build_parser().parse_args(["--autotune", "--autotune-log-file", "t.csv",
                                               "--autotune-sample-seconds", "0.2", "x"])) == {
        "TFRING_AUTOTUNE": "1", "TFRING_AUTOTUNE_LOG": "t.csv", "TFRING_AUTOTUNE_SAMPLE_SECONDS": "0.2"}
    proc = tfringrun(["-np", "2", "--gloo", "python", "x.py"])
    assert proc.returncode != 0 and "--gloo is not supported" in proc.stdout and "use --mpi" in proc.stdout


def test_check_build_is_truthful():
    proc = tfringrun(["--check-build"])
    assert proc.returncode == 0, proc.stdout
    import tensorflow as tf
    assert "built for TensorFlow: %s" % tf.__version__ in proc.stdout
    assert "Open MPI v5" in proc.stdout and "NCCL: no" in proc.stdout and "CUDA: no" in proc.stdout
    for op in ("HorovodAllreduce", "HorovodAlltoall", "HorovodJoin", "HorovodReducescatter"):
        assert op in proc.stdout


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
    lines = [l for l in proc.stdout.splitlines() if "-line" in l]
    assert len(lines) == 900
    for line in lines:
        rank = line[1]
        assert line.startswith("[%s]<stdout>:rank%s-line" % (rank, rank)) and line.endswith("x-end"), line[:80]
    for r in range(3):
        own = (logs / ("rank.%d.log" % r)).read_text().splitlines()
        assert len(own) == 300 and all(l.startswith("[%d]<stdout>:rank%d-" % (r, r)) for l in own)


@pytest.mark.parametrize("mode,code,words", [
    # Rank 1's exit ends tfring on rank 0, which may fail (code 1) before rank 1's own exit is reported:
    # either way the summary names rank 1.
    ("exit3", None, "rank 1"),
    ("kill", 137, "rank 1 on host"),
    ("osexit", None, "rank 1 on host"),
])
def test_a_dying_rank_ends_the_job_naming_it(tmp_path, mode, code, words):
    job = script(tmp_path, """
        import os, signal, sys, time
        import tensorflow as tf, tfring as hvd
        hvd.init()
        for i in range(100000):
            hvd.allreduce(tf.ones([100]), name="step")
            if i == 20 and hvd.rank() == 1:
                if sys.argv[1] == "exit3": sys.exit(3)
                if sys.argv[1] == "kill": os.kill(os.getpid(), signal.SIGKILL)
                if sys.argv[1] == "osexit": os._exit(0)
    """)
    start = time.time()
    proc = tfringrun(["-np", "2", "python", job, mode], timeout=120)
    assert time.time() - start < 60  # includes ~10 s of TensorFlow start-up on two cores
    assert proc.returncode != 0 and (code is None or proc.returncode == code), proc.stdout[-3000:]
    assert words in proc.stdout, proc.stdout[-3000:]
    if mode == "kill":
        assert "signal 9" in proc.stdout
    if mode == "exit3":
        assert proc.returncode in (1, 3)
        assert ("rank 1 exited with code 3" in proc.stdout or
                "tfring had been shut down by rank 1" in proc.stdout), proc.stdout[-3000:]


def test_sigterm_stops_every_rank_within_5_seconds(tmp_path):
    marker = "tfring-sigterm-%d" % os.getpid()
    job = script(tmp_path, """
        import sys, time
        from mpi4py import MPI
        print("ready", MPI.COMM_WORLD.rank, flush=True)
        time.sleep(600)
    """, name=marker + ".py")
    proc = subprocess.Popen([sys.executable, "-m", "tfring.runner", "-np", "2", "python", job], cwd=ROOT,
                            env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = 0
    while seen < 2:
        line = proc.stdout.readline()
        assert line, "job ended early"
        seen += "ready" in line
    start = time.time()
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=30)
    assert time.time() - start < 5 and rc != 0
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], stdout=subprocess.PIPE, text=True).stdout.split()
    assert left == [], "orphan processes: %s" % left


def square_of_rank(offset):
    import tfring as hvd
    import tensorflow as tf
    hvd.init()
    total = int(hvd.allreduce(tf.constant(hvd.rank() + 1), op=hvd.Sum))
    return hvd.rank() ** 2 + offset, total


def test_run_api_returns_results_in_rank_order():
    from tfring.runner import run
    # The ranks import this test module by name (cloudpickle pickles module functions by reference).
    path = os.pathsep.join(p for p in [HERE, os.environ.get("PYTHONPATH", "")] if p)
    results = run(square_of_rank, args=(10,), np=3, env={"PYTHONPATH": path})
    assert results == [(10, 6), (11, 6), (14, 6)]
