"""tfringrun's command line and config file, without launching jobs: every horovodrun 0.28.1 flag is accepted
(and its effect shows in the mpirun command or the ranks' environment) or refused in one line, exit 2."""
import os
import re

import pytest

from tfring.runner.env import forwarded
from tfring.runner.flags import UsageError
from tfring.runner.launch import main, parse
from tfring.runner.mpirun import plan

# horovodrun 0.28.1 --help (and its hidden counterparts such as --no-autotune), every spelling.
HOROVOD_FLAGS = """-h --help -v --version -np --num-proc -cb --check-build --disable-cache --start-timeout
--network-interfaces --network-interface --output-filename --verbose --config-file -p --ssh-port -i
--ssh-identity-file --fusion-threshold-mb --cycle-time-ms --cache-capacity --hierarchical-allreduce
--no-hierarchical-allreduce --hierarchical-allgather --no-hierarchical-allgather --torus-allreduce
--no-torus-allreduce --autotune --no-autotune --autotune-log-file --autotune-warmup-samples
--autotune-steps-per-sample --autotune-bayes-opt-max-samples --autotune-gaussian-process-noise --min-np
--min-num-proc --max-np --max-num-proc --slots-per-host --elastic-timeout --reset-limit --blacklist-cooldown-range
--timeline-filename --timeline-mark-cycles --no-timeline-mark-cycles --no-stall-check --stall-check
--stall-check-warning-time-seconds --stall-check-shutdown-time-seconds --mpi-threads-disable
--no-mpi-threads-disable --mpi-args --tcp --binding-args --num-nccl-streams --thread-affinity
--gloo-timeout-seconds --log-level --log-with-timestamp --log-without-timestamp --log-hide-timestamp
--no-log-hide-timestamp -prefix-timestamp --prefix-output-with-timestamp -H --hosts -hostfile --hostfile
--host-discovery-script --gloo --mpi --jsrun""".split()


def after(cmd, flag, n=1):
    i = cmd.index(flag)
    return cmd[i + 1:i + 1 + n] if n > 1 else cmd[i + 1]


def knob(name, value):
    return lambda cmd, env, args: env.get(name) == value and ("-x", name) in zip(cmd, cmd[1:])


HOSTFILE = "{tmp}/hosts"
CONFIG = "{tmp}/cfg.yaml"
DISCOVERY = "{tmp}/discover.sh"
# argv (before the command) -> check(cmd, env, args) for accepted flags
ACCEPTED = [
    (["-np", "3"], lambda c, e, a: after(c, "-np") == "3"),
    (["--num-proc", "3"], lambda c, e, a: after(c, "-np") == "3"),
    (["-cb"], lambda c, e, a: a.check_build),
    (["--check-build"], lambda c, e, a: a.check_build),
    (["--disable-cache"], lambda c, e, a: "TFRING_CACHE_CAPACITY" not in e),  # horovodrun's check cache only
    (["--start-timeout", "7"], lambda c, e, a: a.start_deadline == 7 and "tfringrun-rank-started" in c[-4]),
    (["--network-interfaces", "eth0,eth1"], lambda c, e, a: after(c, "btl_tcp_if_include") == "eth0,eth1"
     and "oob_tcp_if_include" not in c and e["NCCL_SOCKET_IFNAME"] == "eth0,eth1"),  # one host: no daemon to reach
    (["-H", "h1:1,h2:1", "--network-interfaces", "eth0"], lambda c, e, a: after(c, "btl_tcp_if_include") == "eth0"
     and after(c, "oob_tcp_if_include") == "eth0"),
    (["--network-interface", "eth0", "--network-interface", "eth1"],
     lambda c, e, a: after(c, "btl_tcp_if_include") == "eth0,eth1"),
    (["--output-filename", "logs"], lambda c, e, a: a.output_filename == "logs"),
    (["--verbose"], lambda c, e, a: a.verbose),
    (["--config-file", CONFIG], knob("TFRING_CYCLE_TIME", "3.5")),
    (["-p", "2222"], lambda c, e, a: after(c, "plm_ssh_args") == "-p 2222"),
    (["--ssh-port", "2222"], lambda c, e, a: after(c, "plm_ssh_args") == "-p 2222"),
    (["-i", "/k"], lambda c, e, a: after(c, "plm_ssh_args") == "-i /k"),
    (["--ssh-identity-file", "/k"], lambda c, e, a: after(c, "plm_ssh_args") == "-i /k"),
    (["--fusion-threshold-mb", "32"], knob("TFRING_FUSION_THRESHOLD", str(32 << 20))),
    (["--cycle-time-ms", "2.5"], knob("TFRING_CYCLE_TIME", "2.5")),
    (["--cache-capacity", "5"], knob("TFRING_CACHE_CAPACITY", "5")),
    (["--hierarchical-allreduce"], knob("TFRING_HIERARCHICAL_ALLREDUCE", "1")),
    (["--no-hierarchical-allreduce"], knob("TFRING_HIERARCHICAL_ALLREDUCE", "0")),
    (["--hierarchical-allgather"], knob("TFRING_HIERARCHICAL_ALLGATHER", "1")),
    (["--no-hierarchical-allgather"], knob("TFRING_HIERARCHICAL_ALLGATHER", "0")),
    (["--no-torus-allreduce"], lambda c, e, a: a.torus_allreduce is False),
    (["--autotune"], knob("TFRING_AUTOTUNE", "1")),
    (["--no-autotune"], knob("TFRING_AUTOTUNE", "0")),
    (["--autotune-log-file", "t.csv"], knob("TFRING_AUTOTUNE_LOG", "t.csv")),
    (["--autotune-warmup-samples", "2"], knob("TFRING_AUTOTUNE_WARMUP_SAMPLES", "2")),
    # Bayesian knobs without --autotune: ignored, as horovodrun ignores them then
    (["--autotune-steps-per-sample", "5"], lambda c, e, a: not any("STEPS" in k for k in e)),
    (["--autotune-bayes-opt-max-samples", "5"], lambda c, e, a: not any("BAYES" in k for k in e)),
    (["--autotune-gaussian-process-noise", "0.5"], lambda c, e, a: not any("GAUSSIAN" in k for k in e)),
    # with it: tfring's autotuner runs, the knobs are ignored (one line each: test_runner_horovod_compat.py)
    (["--autotune", "--autotune-steps-per-sample", "5"], lambda c, e, a: e["TFRING_AUTOTUNE"] == "1"
     and not any("STEPS" in k for k in e) and len(a.notes) == 1),
    (["--autotune", "--autotune-bayes-opt-max-samples", "5"], lambda c, e, a: e["TFRING_AUTOTUNE"] == "1"
     and len(a.notes) == 1),
    (["--autotune", "--autotune-gaussian-process-noise", "0.5"], lambda c, e, a: e["TFRING_AUTOTUNE"] == "1"
     and len(a.notes) == 1),
    (["--timeline-filename", "t.json"], knob("TFRING_TIMELINE", "t.json")),
    (["--timeline-mark-cycles"], knob("TFRING_TIMELINE_MARK_CYCLES", "1")),
    (["--no-timeline-mark-cycles"], knob("TFRING_TIMELINE_MARK_CYCLES", "0")),
    (["--no-stall-check"], knob("TFRING_STALL_CHECK_DISABLE", "1")),
    (["--stall-check"], knob("TFRING_STALL_CHECK_DISABLE", "0")),
    (["--stall-check-warning-time-seconds", "5"], knob("TFRING_STALL_CHECK_TIME_SECONDS", "5.0")),
    (["--stall-check-shutdown-time-seconds", "9"], knob("TFRING_STALL_SHUTDOWN_TIME_SECONDS", "9.0")),
    (["--mpi-threads-disable"], knob("MPI4PY_RC_THREAD_LEVEL", "serialized")),
    (["--no-mpi-threads-disable"], lambda c, e, a: "MPI4PY_RC_THREAD_LEVEL" not in e),
    (["--mpi-args=--map-by slot --report-bindings"], lambda c, e, a: after(c, "--map-by", 2) == ["slot",
                                                                                                 "--report-bindings"]),
    (["--tcp"], lambda c, e, a: after(c, "pml") == "ob1" and after(c, "btl") == "tcp,sm,self"
     and e["NCCL_IB_DISABLE"] == "1"),
    (["--binding-args=--bind-to core --map-by core"], lambda c, e, a: after(c, "--bind-to") == "core"
     and "none" not in c and after(c, "--map-by") == "core"),
    (["--num-nccl-streams", "1"], lambda c, e, a: True),
    (["--gloo-timeout-seconds", "30"], lambda c, e, a: not any("GLOO" in k for k in e)),
    (["--log-level", "DEBUG"], knob("TFRING_LOG_LEVEL", "debug")),
    (["--log-level", "FATAL"], knob("TFRING_LOG_LEVEL", "error")),
    (["--log-with-timestamp"], lambda c, e, a: a.log_with_timestamp is True),
    (["--no-log-hide-timestamp"], lambda c, e, a: a.log_with_timestamp is True),
    (["--log-without-timestamp"], lambda c, e, a: a.log_with_timestamp is False),
    (["--log-hide-timestamp"], lambda c, e, a: a.log_with_timestamp is False),
    (["-prefix-timestamp"], lambda c, e, a: a.prefix_output_with_timestamp and a.ssh_port is None),
    (["--prefix-output-with-timestamp"], lambda c, e, a: a.prefix_output_with_timestamp),
    (["-H", "h1:1,h2:1"], lambda c, e, a: after(c, "--host") == "h1:1,h2:1" and "oob_tcp_keepalive_time" in c),
    (["--hosts", "h1:2"], lambda c, e, a: after(c, "--host") == "h1:2" and after(c, "-np") == "2"),
    (["-hostfile", HOSTFILE], lambda c, e, a: after(c, "--host") == "n1:2,n2:1" and a.hosts is None),
    (["--hostfile", HOSTFILE], lambda c, e, a: after(c, "--host") == "n1:2,n2:1"),
    (["--mpi"], lambda c, e, a: a.use_mpi),
    # elastic mode (planned by tests/elastic/test_elastic_driver.py): horovodrun's defaults filled in
    (["--min-np", "1"], lambda c, e, a: (a.min_num_proc, a.np, a.max_num_proc) == (1, 2, None)),
    (["--min-num-proc", "1"], lambda c, e, a: (a.min_num_proc, a.np) == (1, 2)),
    (["--max-np", "4"], lambda c, e, a: (a.min_num_proc, a.np, a.max_num_proc) == (2, 2, 4)),
    (["--max-num-proc", "4"], lambda c, e, a: (a.min_num_proc, a.max_num_proc) == (2, 4)),
    (["--min-np", "1", "--slots-per-host", "2"], lambda c, e, a: a.slots == 2),
    (["--min-np", "1", "--elastic-timeout", "5"], lambda c, e, a: a.elastic_timeout == 5),
    (["--min-np", "1", "--reset-limit", "2"], lambda c, e, a: a.reset_limit == 2),
    (["--min-np", "1", "--blacklist-cooldown-range", "1", "2"], lambda c, e, a: a.cooldown_range == [1, 2]),
    (["--host-discovery-script", DISCOVERY], lambda c, e, a: a.host_discovery_script == os.path.abspath(
        a.host_discovery_script) and a.min_num_proc == 2),
]
# argv -> the flag the one-line refusal names
REFUSED = [
    (["--torus-allreduce"], "--torus-allreduce"),
    (["--autotune", "--autotune-steps-per-sample", "x"], "--autotune-steps-per-sample: invalid int value: 'x'"),
    (["--autotune", "--autotune-gaussian-process-noise", "2"], "--autotune-gaussian-process-noise: 2.0 must be in"),
    (["--min-np", "0"], "--min-np: must be at least 1, got 0"), (["--min-num-proc", "3"], "-np: 2 is below --min-np 3"),
    (["--max-np", "0"], "--max-np: must be at least 1, got 0"), (["--max-num-proc", "1"], "-np: 2 is above --max-np 1"),
    (["--min-np", "3", "--max-np", "2"], "--min-np: 3 is above --max-np 2"),
    (["--slots-per-host", "2"], "--slots-per-host: only used in elastic mode"),
    (["--min-np", "1", "--slots-per-host", "0"], "--slots-per-host: must be at least 1, got 0"),
    (["--min-np", "1", "--elastic-timeout", "-1"], "--elastic-timeout: -1 must be >= 0"),
    (["--min-np", "1", "--reset-limit", "-1"], "--reset-limit: -1 must be >= 0"),
    (["--min-np", "1", "--blacklist-cooldown-range", "5", "2"], "--blacklist-cooldown-range: 5 2: expected 0 <="),
    (["--min-np", "1", "--blacklist-cooldown-range", "-1", "2"], "--blacklist-cooldown-range: -1 2"),
    (["--host-discovery-script", "no-such-d.sh"], "--host-discovery-script no-such-d.sh: does not exist"),
    (["--host-discovery-script", HOSTFILE], "--host-discovery-script {tmp}/hosts: is not executable"),
    (["--host-discovery-script", DISCOVERY, "-H", "h1:1"], "-H/--hosts: not allowed with argument"),
    (["--num-nccl-streams", "2"], "--num-nccl-streams"), (["--thread-affinity", "0"], "--thread-affinity"),
    (["--gloo"], "--gloo"), (["--jsrun"], "--jsrun"),
    (["--cycle-time-ms", "-1"], "--cycle-time-ms"),
    (["--no-such-flag"], "--no-such-flag"), (["-np", "x"], "-np"), (["--log-level", "loud"], "--log-level"),
    (["--torus-allreduce", "--no-torus-allreduce"], "--no-torus-allreduce"),
    (["-H", "h1", "-hostfile", "f"], "-hostfile"), (["--gloo", "--mpi"], "--mpi"),
]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "hosts").write_text("n1 slots=2\nn2\n")
    (tmp_path / "cfg.yaml").write_text("params: {cycle_time_ms: 3.5}\n")
    (tmp_path / "discover.sh").write_text("#!/bin/sh\necho localhost:2\n")
    (tmp_path / "discover.sh").chmod(0o755)
    return lambda argv: [a.replace("{tmp}", str(tmp_path)) for a in argv]


def test_every_horovodrun_flag_is_covered():
    seen = {a.split("=")[0] for argv, _ in ACCEPTED + REFUSED for a in argv if a.startswith("-")}
    missing = [f for f in HOROVOD_FLAGS if f not in seen and f not in ("-h", "--help", "-v", "--version")]
    assert missing == []


@pytest.mark.parametrize("argv,ok", ACCEPTED, ids=[" ".join(a) for a, _ in ACCEPTED])
def test_accepted_flag_takes_effect(argv, ok, files):
    sized = any(a in argv for a in ("-np", "--num-proc", "-H", "--hosts", "-hostfile", "--hostfile"))
    args = parse(files(argv) + ([] if sized else ["-np", "2"]) + ["python", "x.py"])
    cmd, env = plan(args, {"PATH": os.environ["PATH"]})
    assert ok(cmd, env, args), (cmd, {k: v for k, v in env.items() if k != "PATH"})
    assert cmd[-1] == "x.py"


@pytest.mark.parametrize("argv,flag", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_refused_flag_is_one_line_exit_2(argv, flag, capsys, files):
    argv = files(argv)
    with pytest.raises(SystemExit) as e:
        main(argv + ["-np", "2", "python", "x.py"] if "-np" not in argv else argv + ["python", "x.py"])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tfringrun: ") and files([flag])[0] in err, err
    assert "usage" not in err.lower()


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["-v"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert re.match(r"tfringrun \(tfring [\d.]+\): TensorFlow 2\.\d+\S*( \(library built for \S+\))?, Open MPI 5\.",
                    out), out
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and "-prefix-timestamp" in capsys.readouterr().out


def test_single_dash_aliases_are_not_split():
    """argparse must not read -hostfile as -h, -prefix-timestamp as -p, -np/-cb as short flags."""
    args = parse(["-np", "2", "-cb", "-prefix-timestamp", "-hostfile", "hf", "python", "x.py", "-p", "1"])
    assert (args.np, args.check_build, args.prefix_output_with_timestamp, args.hostfile) == (2, True, True, "hf")
    assert args.ssh_port is None and args.command == ["python", "x.py", "-p", "1"]


FULL = """
verbose: true
controller: mpi
params: {fusion_threshold_mb: 32, cycle_time_ms: 2.5, cache_capacity: 10, hierarchical_allreduce: false,
         hierarchical_allgather: false, torus_allreduce: false}
autotune:
  enabled: true
  log_file: tune.csv
  warmup_samples: 2
  sample_seconds: 0.5
timeline: {filename: tl.json, mark_cycles: true}
stall_check: {enabled: false, warning_time_seconds: 30, shutdown_time_seconds: 90}
library_options: {mpi_threads_disable: true, num_nccl_streams: 1, gloo_timeout_seconds: 30}
logging: {level: DEBUG, with_timestamp: true}
"""


def test_config_file_whole_layout_and_command_line_wins(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(FULL)
    args = parse(["-np", "2", "--config-file", str(cfg), "python", "x.py"])
    _, env = plan(args, {})
    assert {k: v for k, v in env.items() if k.startswith(("TFRING_", "MPI4PY"))} == {
        "TFRING_FUSION_THRESHOLD": str(32 << 20), "TFRING_CYCLE_TIME": "2.5", "TFRING_CACHE_CAPACITY": "10",
        "TFRING_HIERARCHICAL_ALLREDUCE": "0", "TFRING_HIERARCHICAL_ALLGATHER": "0",
        "TFRING_AUTOTUNE": "1", "TFRING_AUTOTUNE_LOG": "tune.csv", "TFRING_AUTOTUNE_WARMUP_SAMPLES": "2",
        "TFRING_AUTOTUNE_SAMPLE_SECONDS": "0.5", "TFRING_TIMELINE": "tl.json", "TFRING_TIMELINE_MARK_CYCLES": "1",
        "TFRING_STALL_CHECK_DISABLE": "1", "TFRING_STALL_CHECK_TIME_SECONDS": "30.0",
        "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "90.0", "TFRING_LOG_LEVEL": "debug",
        "MPI4PY_RC_THREAD_LEVEL": "serialized"}
    assert args.verbose and args.log_with_timestamp and args.use_mpi
    args = parse(["-np", "2", "--config-file", str(cfg), "--cycle-time-ms", "7", "--no-autotune", "--stall-check",
                  "--log-without-timestamp", "python", "x.py"])
    _, env = plan(args, {})
    assert (env["TFRING_CYCLE_TIME"], env["TFRING_AUTOTUNE"], env["TFRING_STALL_CHECK_DISABLE"]) == ("7.0", "0", "0")
    assert args.log_with_timestamp is False
    cfg.write_text("controller: gloo\n")
    assert parse(["-np", "2", "--config-file", str(cfg), "--mpi", "python", "x.py"]).use_gloo is None  # the flag wins


@pytest.mark.parametrize("text,words", [
    (None, ["cannot read it", "No such file"]),
    ("params: {cycle_time_ms: 1\n", ["not valid YAML", "line"]),
    ("params:\n  fusion_threshold: 3\n", ["unknown key params.fusion_threshold"]),
    ("parameters:\n  cycle_time_ms: 3\n", ["unknown key 'parameters'"]),
    ("params: {fusion_threshold_mb: abc}\n", ["params.fusion_threshold_mb", "'abc'", "not a number"]),
    ("params: {cache_capacity: 1.5}\n", ["params.cache_capacity", "1.5", "not an integer"]),
    ("timeline: {mark_cycles: 3}\n", ["timeline.mark_cycles", "3", "not true or false"]),
    ("params: {fusion_threshold_mb: true}\n", ["params.fusion_threshold_mb", "True"]),
    ("logging: {level: loud}\n", ["logging.level", "'loud'"]),
    ("params: 5\n", ["params", "expected a mapping"]),
    ("- a\n- b\n", ["expected a mapping"]),
    ("controller: tcp\n", ["controller", "'tcp'", "one of gloo, mpi"]),
    ("library_options: {thread_affinity: -1}\n", ["library_options.thread_affinity: -1", ">= 0"]),
    ("params: {cycle_time_ms: -2}\n", ["params.cycle_time_ms: -2", "must be in [0, 1000000]"]),
])
def test_config_errors_are_one_line_naming_file_key_value(tmp_path, capsys, text, words):
    cfg = tmp_path / "my.yaml"
    if text is not None:
        cfg.write_text(text)
    with pytest.raises(SystemExit) as e:
        main(["-np", "2", "--config-file", str(cfg), "python", "x.py"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and str(cfg) in err, err
    for w in words:
        assert w in err, err


def test_config_asking_an_unbuilt_feature_off_is_accepted(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("controller: mpi\nparams: {torus_allreduce: false}\n"
                   "library_options: {num_nccl_streams: 1, gloo_timeout_seconds: 5}\n"
                   "autotune: {enabled: false, bayes_opt_max_samples: 3, gaussian_process_noise: 0.2}\n"
                   "logging:\nstall_check: {enabled: true}\n")
    args = parse(["-np", "2", "--config-file", str(cfg), "python", "x.py"])
    assert plan(args, {})[1]["TFRING_STALL_CHECK_DISABLE"] == "0"
    assert [n.split(": ")[1] for n in args.notes] == ["autotune.bayes_opt_max_samples",
                                                       "autotune.gaussian_process_noise",
                                                       "library_options.gloo_timeout_seconds"], args.notes


def test_config_asking_an_unbuilt_feature_on_is_ignored_in_one_line(tmp_path):
    """A config file is often shared with Horovod jobs: unlike the flags, its keys for unbuilt features are named
    and ignored (the flags stay refused: test_refused_flag_is_one_line_exit_2)."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("controller: gloo\nparams: {torus_allreduce: true, cycle_time_ms: 4}\n"
                   "library_options: {thread_affinity: 1, num_nccl_streams: 4}\n")
    args = parse(["-np", "2", "--config-file", str(cfg), "python", "x.py"])
    assert (args.use_gloo, args.torus_allreduce, args.thread_affinity, args.num_nccl_streams) == (None,) * 4
    assert plan(args, {})[1]["TFRING_CYCLE_TIME"] == "4.0"
    assert sorted(n.split(" ignored: ")[0].split(": ", 1)[1] for n in args.notes) == [
        "controller: 'gloo'", "library_options.num_nccl_streams: 4", "library_options.thread_affinity: 1",
        "params.torus_allreduce: True"], args.notes


def test_forwarded_environment():
    environ = {"MY_VAR": "x y", "PYTHONPATH": "/p", "PATH": "/bin", "LD_LIBRARY_PATH": "/l", "HOROVOD_X": "1",
               "TFRING_Y": "1", "OMPI_MCA_btl": "tcp,self", "PWD": "/", "OLDPWD": "/", "SHLVL": "2", "_": "/bin/x",
               "HOSTNAME": "h", "BASH_FUNC_f%%": "() { :; }", "SSH_AUTH_SOCK": "/s", "SSH_CONNECTION": "c",
               "CUDA_VISIBLE_DEVICES": "0", "OMPI_COMM_WORLD_RANK": "0", "PMIX_RANK": "0", "XDG_RUNTIME_DIR": "/r"}
    assert forwarded(environ) == ["HOROVOD_X", "LD_LIBRARY_PATH", "MY_VAR", "PATH", "PYTHONPATH", "TFRING_Y"]
    cmd, env = plan(parse(["-np", "2", "-H", "h1:1,h2:1", "--fusion-threshold-mb", "1", "python", "x.py"]), environ)
    exported = [b for a, b in zip(cmd, cmd[1:]) if a == "-x"]
    assert exported == ["GLIBC_TUNABLES", "HOROVOD_X", "LD_LIBRARY_PATH", "MY_VAR", "PATH", "PYTHONPATH",
                        "TFRING_FUSION_THRESHOLD", "TFRING_Y"]  # (GLIBC_TUNABLES: the ranks' huge pages)
    assert env["MY_VAR"] == "x y" and env["TFRING_FUSION_THRESHOLD"] == str(1 << 20)


def test_start_timeout_from_environment_and_default():
    def deadline(argv, environ):
        args = parse(argv + ["python", "x.py"])
        cmd = plan(args, environ)[0]
        assert ("/bin/sh" in cmd) == bool(args.start_deadline)  # ranks announce their start
        return args.start_deadline

    assert deadline(["-np", "1"], {"HOROVOD_START_TIMEOUT": "12"}) == 12
    assert deadline(["-np", "1"], {}) == 0  # local jobs: no deadline unless asked
    assert deadline(["-H", "h1:1,h2:1"], {}) == 30  # remote hosts: horovodrun's default
    assert deadline(["-H", "h1:1,h2:1", "--start-timeout", "0"], {}) == 0
    with pytest.raises(UsageError, match="TFRING_START_TIMEOUT='soon'"):
        deadline(["-np", "1"], {"TFRING_START_TIMEOUT": "soon"})


@pytest.mark.parametrize("given,want", [(None, "glibc.malloc.hugetlb=1"),
                                        ("glibc.malloc.arena_max=2", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),
                                        ("glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=0")])
def test_ranks_get_huge_pages_for_large_allocations_unless_told_otherwise(given, want):
    args = parse(["-np", "2", "python", "x.py"])
    cmd, env = plan(args, {} if given is None else {"GLIBC_TUNABLES": given})
    assert env["GLIBC_TUNABLES"] == want
    assert ["-x", "GLIBC_TUNABLES"] in [cmd[i:i + 2] for i in range(len(cmd) - 1)]  # forwarded to every host
