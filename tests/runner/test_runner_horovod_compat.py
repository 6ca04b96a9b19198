"""horovodrun cases tfringrun used to refuse (issue #27): a loopback-only --network-interface(s) on one host, the
Bayesian autotune knobs with --autotune, and Horovod's whole config layout (its own test config). Each is accepted:
what tfring has a counterpart for takes effect, the rest is named in one line each, once per job; malformed values
and keys outside Horovod's layout stay one-line refusals."""
import io
import json
import socket

import pytest

from runner_helpers import script, tfringrun
from tfring.runner.flags import UsageError
from tfring.runner.launch import main, parse, say_notes
from tfring.runner.mpirun import nic_args, plan

BAYES = ["--autotune-steps-per-sample", "20", "--autotune-bayes-opt-max-samples", "50",
         "--autotune-gaussian-process-noise", "0.9"]
TCP_ONLY = "--mpi-args=--mca pml ob1 --mca btl tcp,self"  # no shared memory: the ranks' traffic goes over TCP



def notes_of(argv):
    out = io.StringIO()
    say_notes(parse(argv + ["python", "x.py"]), out)
    return out.getvalue().splitlines()


def refusal(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv + ["python", "x.py"])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "" and err.count("\n") == 1 and err.startswith("tfringrun: "), err
    return err


# --- 1. --network-interface(s) naming the loopback on one host -------------------------------------------------

@pytest.mark.parametrize("hosts,nics,want", [
    ([], ["lo"], ["--mca", "btl_tcp_if_include", "lo"]),
    (["localhost", "127.0.0.1", socket.gethostname()], ["lo", "eth0"], ["--mca", "btl_tcp_if_include", "lo,eth0"]),
    (["h1", "h2"], ["eth0"], ["--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0"]),
    (["h1", "h2"], ["lo", "10.0.0.0/24"], ["--mca", "btl_tcp_if_include", "lo,10.0.0.0/24",
                                           "--mca", "oob_tcp_if_include", "lo,10.0.0.0/24"]),
])
def test_nics_restrict_the_daemons_only_across_hosts(hosts, nics, want):
    """PRRTE's daemons never use a loopback interface (a loopback-only oob_tcp_if_include: mpirun exit 213); on one
    host there is no daemon to reach, so only the ranks' TCP BTL is restricted, as horovodrun does."""
    assert nic_args(nics, hosts) == want


@pytest.mark.parametrize("nics", [["lo"], ["127.0.0.0/8"], ["lo", "127.0.0.1/32"]])
def test_loopback_only_nics_across_hosts_are_refused_in_one_line(nics, capsys):
    with pytest.raises(UsageError, match="cannot reach the other hosts \\(h2\\)"):
        nic_args(nics, ["localhost", "h2"])
    err = refusal(["-H", "localhost:1,h2:1", "--network-interfaces", ",".join(nics)], capsys)
    assert "--network-interface %s: the loopback interface" % ",".join(nics) in err, err


def test_single_host_lo_plan_keeps_nccl_socket_ifname():
    cmd, env = plan(parse(["-np", "2", "--network-interface", "lo", "python", "x.py"]), {})
    assert "oob_tcp_if_include" not in cmd and cmd[cmd.index("btl_tcp_if_include") + 1] == "lo"
    assert env["NCCL_SOCKET_IFNAME"] == "lo"  # as horovodrun


@pytest.mark.slow
def test_network_interface_lo_runs_a_tfring_job_over_tcp(tmp_path):
    """tfring's collectives over the TCP BTL restricted to the loopback (shared memory off): exit 213 before."""
    job = script(tmp_path, """
        import os
        import tensorflow as tf, tfring as hvd
        from mpi4py import MPI
        hvd.init()
        v = hvd.allreduce(tf.constant([1.0, float(hvd.rank())]), op=hvd.Sum, name="nic")
        print("NIC", hvd.rank(), v.numpy().tolist(), os.environ["OMPI_MCA_btl_tcp_if_include"],
              MPI.Get_library_version().split(",")[0], flush=True)
    """)
    proc = tfringrun(["-np", "2", "--network-interface", "lo", TCP_ONLY, "python", job])
    assert proc.returncode == 0, proc.stdout[-4000:]
    for r in range(2):
        assert "[%d]<stdout>:NIC %d [2.0, 1.0] lo Open MPI v5" % (r, r) in proc.stdout, proc.stdout[-4000:]


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--network-interfaces", "lo"],
                                   ["--network-interface", "lo", "--network-interface", "127.0.0.0/8"]])
def test_network_interfaces_lo_runs_an_mpi_job_over_tcp(tmp_path, flags):
    job = script(tmp_path, """
        from mpi4py import MPI
        c = MPI.COMM_WORLD
        print("SUM", c.rank, c.allreduce(c.rank + 1), flush=True)
    """)
    proc = tfringrun(["-np", "2"] + flags + [TCP_ONLY, "python", job], timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert sorted(ln for ln in proc.stdout.splitlines() if "SUM" in ln) == [
        "[0]<stdout>:SUM 0 3", "[1]<stdout>:SUM 1 3"], proc.stdout[-4000:]


# --- 2. --autotune with Horovod's Bayesian-optimisation knobs ---------------------------------------------------

def test_bayes_knobs_with_autotune_run_tfrings_autotuner_and_say_what_is_ignored():
    args = parse(["-np", "2", "--autotune"] + BAYES + ["python", "x.py"])
    _, env = plan(args, {})
    assert {k: v for k, v in env.items() if "AUTOTUNE" in k} == {"TFRING_AUTOTUNE": "1"}
    notes = notes_of(["-np", "2", "--autotune"] + BAYES)
    assert [n.split(" ignored: ")[0] for n in notes] == [
        "tfringrun: --autotune-steps-per-sample 20", "tfringrun: --autotune-bayes-opt-max-samples 50",
        "tfringrun: --autotune-gaussian-process-noise 0.9"], notes
    assert "samples by time" in notes[0] and "not Bayesian optimisation" in notes[1] and "median" in notes[2]
    # horovodrun's types: int, int, float (an integer noise is a float too)
    args = parse(["-np", "2", "--autotune", "--autotune-gaussian-process-noise", "1", "--autotune-steps-per-sample",
                  "0", "python", "x.py"])
    assert (args.autotune_gaussian_process_noise, args.autotune_steps_per_sample) == (1.0, 0)


@pytest.mark.parametrize("argv,words", [
    (["--autotune-steps-per-sample", "2.5"], "argument --autotune-steps-per-sample: invalid int value: '2.5'"),
    (["--autotune-bayes-opt-max-samples", "many"], "--autotune-bayes-opt-max-samples: invalid int value: 'many'"),
    (["--autotune-gaussian-process-noise", "x"], "--autotune-gaussian-process-noise: invalid float value: 'x'"),
    (["--autotune-gaussian-process-noise", "1.5"], "--autotune-gaussian-process-noise: 1.5 must be in [0, 1]"),
    (["--autotune-steps-per-sample", "-1"], "--autotune-steps-per-sample: -1 must be >= 0"),
    (["--autotune-bayes-opt-max-samples", "-3"], "--autotune-bayes-opt-max-samples: -3 must be >= 0"),
])
def test_malformed_bayes_knobs_are_refused_naming_flag_and_value(argv, words, capsys):
    assert words in refusal(["-np", "2", "--autotune"] + argv, capsys)


@pytest.mark.slow
def test_autotune_with_bayes_knobs_runs_the_autotuner(tmp_path):
    """A real job: refused (exit 2) before; now the autotuner runs (its log) and each ignored knob is one line."""
    log = tmp_path / "tune.csv"
    job = script(tmp_path, """
        import os, sys, time
        import tensorflow as tf, tfring as hvd
        hvd.init()
        end, sampled = time.time() + 60, 0.0
        while not sampled and time.time() < end:  # rank 0 decides for all: every rank runs as many collectives
            for _ in range(20):
                hvd.allreduce(tf.ones([1 << 14]), name="tuned")
            seen = hvd.rank() == 0 and "\\nsample," in open(sys.argv[1]).read()
            sampled = float(hvd.broadcast(tf.constant(float(seen)), 0, name="sampled"))
        print("TUNED", hvd.rank(), os.environ["TFRING_AUTOTUNE"], sampled, flush=True)
    """)
    proc = tfringrun(["-np", "2", "--autotune", "--autotune-log-file", str(log), "--autotune-warmup-samples", "0",
                      "--autotune-sample-seconds", "0.2", "--autotune-samples-per-candidate", "1"] + BAYES +
                     ["python", job, str(log)])
    assert proc.returncode == 0, proc.stdout[-4000:]
    for r in range(2):  # both ranks ran until rank 0's autotuner had logged a sample
        assert proc.stdout.count("[%d]<stdout>:TUNED %d 1 1.0" % (r, r)) == 1, proc.stdout[-4000:]
    for flag in BAYES[::2]:
        assert sum(ln.startswith("tfringrun: %s " % flag) for ln in proc.stdout.splitlines()) == 1, proc.stdout
    rows = log.read_text().splitlines()
    assert rows[0].startswith("event,fusion_threshold_bytes,cycle_time_ms") and \
        any(r.startswith("sample,") for r in rows[1:]), rows


# --- 3. Horovod's config layout ---------------------------------------------------------------------------------

# The keys of Horovod 0.28.1's own test config (test/single/data/config.test.yaml), written out here with paths
# in the test's directory: every section and key of its config_parser, plus logging.hide_timestamp.
HOROVOD_CONFIG = """
controller: gloo

params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
  hierarchical_allgather: true

autotune:
  enabled: true
  log_file: '{tmp}/horovod_autotune_log.txt'
  warmup_samples: 5
  steps_per_sample: 20
  bayes_opt_max_samples: 50
  gaussian_process_noise: 0.9

timeline:
  filename: '{tmp}/horovod_timeline.json'
  mark_cycles: true

stall_check:
  enabled: true
  warning_time_seconds: 120
  shutdown_time_seconds: 240

library_options:
  mpi_threads_disable: true
  num_nccl_streams: 2
  thread_affinity: 1
  gloo_timeout_seconds: 60

logging:
  level: INFO
  hide_timestamp: true
"""
MAPPED = {"TFRING_FUSION_THRESHOLD": str(32 << 20), "TFRING_CYCLE_TIME": "10.0", "TFRING_CACHE_CAPACITY": "2048",
          "TFRING_HIERARCHICAL_ALLREDUCE": "1", "TFRING_HIERARCHICAL_ALLGATHER": "1", "TFRING_AUTOTUNE": "1",
          "TFRING_AUTOTUNE_LOG": "{tmp}/horovod_autotune_log.txt", "TFRING_AUTOTUNE_WARMUP_SAMPLES": "5",
          "TFRING_TIMELINE": "{tmp}/horovod_timeline.json", "TFRING_TIMELINE_MARK_CYCLES": "1",
          "TFRING_STALL_CHECK_DISABLE": "0", "TFRING_STALL_CHECK_TIME_SECONDS": "120.0",
          "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "240.0", "TFRING_LOG_LEVEL": "info"}
IGNORED_KEYS = ["controller: 'gloo'", "library_options.thread_affinity: 1", "library_options.num_nccl_streams: 2",
                "autotune.steps_per_sample: 20", "autotune.bayes_opt_max_samples: 50",
                "autotune.gaussian_process_noise: 0.9", "library_options.gloo_timeout_seconds: 60"]


def horovod_config(tmp_path):
    cfg = tmp_path / "config.test.yaml"
    cfg.write_text(HOROVOD_CONFIG.replace("{tmp}", str(tmp_path)))
    return str(cfg)


def test_horovods_test_config_is_applied_and_the_rest_named_once(tmp_path):
    cfg = horovod_config(tmp_path)
    args = parse(["-np", "2", "--config-file", cfg, "python", "x.py"])
    _, env = plan(args, {})
    assert {k: v for k, v in env.items() if k.startswith("TFRING_")} == {
        k: v.replace("{tmp}", str(tmp_path)) for k, v in MAPPED.items()}
    assert env["MPI4PY_RC_THREAD_LEVEL"] == "serialized" and args.log_with_timestamp is False
    assert (args.use_gloo, args.num_nccl_streams, args.thread_affinity) == (None, None, None)  # MPI, as built
    notes = notes_of(["-np", "2", "--config-file", cfg])
    assert sorted(n.split(" ignored: ")[0] for n in notes) == sorted(
        "tfringrun: --config-file %s: %s" % (cfg, k) for k in IGNORED_KEYS), notes


@pytest.mark.parametrize("text,words", [
    ("logging: {hide_time: true}\n", "unknown key logging.hide_time (known in logging: level, with_timestamp, "
                                     "hide_timestamp)"),
    ("autotune: {max_samples: 3}\n", "unknown key autotune.max_samples"),
    ("library_options: {nccl_streams: 2}\n", "unknown key library_options.nccl_streams"),
    ("tuning: {enabled: true}\n", "unknown key 'tuning'"),
    ("logging: {hide_timestamp: yes please}\n", "logging.hide_timestamp: 'yes please' is not true or false"),
    ("logging: {with_timestamp: true, hide_timestamp: true}\n",
     "logging.hide_timestamp: True contradicts logging.with_timestamp: True"),
    ("autotune: {enabled: true, gaussian_process_noise: 2}\n", "autotune.gaussian_process_noise: 2: 2.0 must be in"),
    ("autotune: {steps_per_sample: 2.5}\n", "autotune.steps_per_sample: 2.5 is not an integer"),
])
def test_keys_outside_horovods_layout_and_bad_values_are_refused(tmp_path, capsys, text, words):
    cfg = tmp_path / "my.yaml"
    cfg.write_text(text)
    err = refusal(["-np", "2", "--config-file", str(cfg)], capsys)
    assert str(cfg) in err and words in err, err


def test_hide_timestamp_is_the_config_spelling_of_log_hide_timestamp(tmp_path):
    cfg = tmp_path / "c.yaml"
    for text, want in (("logging: {hide_timestamp: false}\n", True), ("logging: {hide_timestamp: true}\n", False)):
        cfg.write_text(text)
        assert parse(["-np", "1", "--config-file", str(cfg), "python", "x.py"]).log_with_timestamp is want
    assert parse(["-np", "1", "--config-file", str(cfg), "--log-with-timestamp", "python", "x.py"]).log_with_timestamp


@pytest.mark.slow
def test_horovods_test_config_runs_a_job_with_its_values(tmp_path):
    """Refused before (unknown key logging.hide_timestamp); now the ranks run with its values and the runtime uses
    them (timeline with cycle marks, the autotuner's log, MPI without thread support)."""
    cfg = horovod_config(tmp_path)
    job = script(tmp_path, """
        import json, os
        import tensorflow as tf, tfring as hvd
        hvd.init()
        for _ in range(3):
            hvd.allreduce(tf.ones([4]), name="configured")
        knobs = {k: v for k, v in os.environ.items() if k.startswith("TFRING_")}
        print("CFG", hvd.rank(), hvd.mpi_threads_supported(), json.dumps(knobs, sort_keys=True), flush=True)
    """)
    proc = tfringrun(["-np", "2", "--config-file", cfg, "python", job])
    assert proc.returncode == 0, proc.stdout[-4000:]
    want = {k: v.replace("{tmp}", str(tmp_path)) for k, v in MAPPED.items()}
    for r in range(2):
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("[%d]<stdout>:CFG %d False " % (r, r))]
        assert len(line) == 1, proc.stdout[-4000:]
        got = json.loads(line[0].split(" ", 3)[3])
        assert {k: got.get(k) for k in want} == want, got
    for key in IGNORED_KEYS:  # once per job, not per rank
        assert proc.stdout.count("tfringrun: --config-file %s: %s ignored: " % (cfg, key)) == 1, proc.stdout[-4000:]
    events = json.loads((tmp_path / "horovod_timeline.json").read_text())
    assert any(e.get("name") == "CYCLE_START" for e in events)
    assert (tmp_path / "horovod_autotune_log.txt").read_text().startswith("event,fusion_threshold_bytes")
