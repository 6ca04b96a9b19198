"""horovodrun's command line and config file, mapped onto tfring's knob table (TFRING_* variables)."""
import argparse

# flag (argparse dest) -> (TFRING_ knob, conversion). Each knob is one row of the runtime's table (env.cc).
KNOB_FLAGS = {
    "fusion_threshold_mb": ("TFRING_FUSION_THRESHOLD", lambda v: str(int(float(v) * 1024 * 1024))),
    "cycle_time_ms": ("TFRING_CYCLE_TIME", str),
    "cache_capacity": ("TFRING_CACHE_CAPACITY", str),
    "log_level": ("TFRING_LOG_LEVEL", lambda v: str(v).lower()),
    "timeline_filename": ("TFRING_TIMELINE", str),
    "timeline_mark_cycles": ("TFRING_TIMELINE_MARK_CYCLES", lambda v: "1" if v else "0"),
    "stall_check_warning_time_seconds": ("TFRING_STALL_CHECK_TIME_SECONDS", str),
    "stall_check_shutdown_time_seconds": ("TFRING_STALL_SHUTDOWN_TIME_SECONDS", str),
    "autotune": ("TFRING_AUTOTUNE", lambda v: "1" if v else "0"),
    "autotune_log_file": ("TFRING_AUTOTUNE_LOG", str),
    "autotune_warmup_samples": ("TFRING_AUTOTUNE_WARMUP_SAMPLES", str),
    "autotune_sample_seconds": ("TFRING_AUTOTUNE_SAMPLE_SECONDS", str),
    "autotune_samples_per_candidate": ("TFRING_AUTOTUNE_SAMPLES_PER_CANDIDATE", str),
}
# Flags of features tfring does not have yet: refusing is better than silently ignoring them.
NOT_BUILT = {
    "hierarchical_allreduce": "hierarchical allreduce", "start_timeout": "a start-up timeout",
    # horovodrun's Bayesian-optimisation knobs: tfring's autotune is a coordinate search without them.
    "autotune_bayes_opt_max_samples": "Bayesian-optimisation autotune",
    "autotune_steps_per_sample": "step-counted autotune samples (use --autotune-sample-seconds)",
    "autotune_gaussian_process_noise": "Bayesian-optimisation autotune",
}
# horovodrun's YAML config layout: section -> {key: dest}
CONFIG_KEYS = {
    "params": {"fusion_threshold_mb": "fusion_threshold_mb", "cycle_time_ms": "cycle_time_ms",
               "cache_capacity": "cache_capacity", "hierarchical_allreduce": "hierarchical_allreduce"},
    "autotune": {"enabled": "autotune", "log_file": "autotune_log_file",
                 "warmup_samples": "autotune_warmup_samples", "sample_seconds": "autotune_sample_seconds",
                 "samples_per_candidate": "autotune_samples_per_candidate",
                 "steps_per_sample": "autotune_steps_per_sample",
                 "bayes_opt_max_samples": "autotune_bayes_opt_max_samples",
                 "gaussian_process_noise": "autotune_gaussian_process_noise"},
    "timeline": {"filename": "timeline_filename", "mark_cycles": "timeline_mark_cycles"},
    "stall_check": {"enabled": "stall_check_enabled", "warning_time_seconds": "stall_check_warning_time_seconds",
                    "shutdown_time_seconds": "stall_check_shutdown_time_seconds"},
    "logging": {"level": "log_level"},
}


def build_parser():
    p = argparse.ArgumentParser(prog="tfringrun", description="Launch a tfring (Horovod-style) job over MPI.")
    p.add_argument("-np", "--num-proc", dest="np", type=int, help="number of processes")
    p.add_argument("-H", "--hosts", help="host1:slots,host2:slots (default localhost:<np>)")
    p.add_argument("--hostfile", help="file of 'host slots=N' lines")
    p.add_argument("--fusion-threshold-mb", type=float)
    p.add_argument("--cycle-time-ms", type=float)
    p.add_argument("--cache-capacity", type=int)
    p.add_argument("--disable-cache", action="store_true")
    p.add_argument("--hierarchical-allreduce", action="store_true", default=None)
    p.add_argument("--timeline-filename")
    p.add_argument("--timeline-mark-cycles", action="store_true", default=None)
    p.add_argument("--autotune", action="store_true", default=None)
    p.add_argument("--autotune-log-file", help="CSV of every autotune sample and decision (rank 0)")
    p.add_argument("--autotune-warmup-samples", type=int)
    p.add_argument("--autotune-sample-seconds", type=float, help="seconds of collective activity per sample")
    p.add_argument("--autotune-samples-per-candidate", type=int)
    p.add_argument("--autotune-steps-per-sample", type=int)
    p.add_argument("--autotune-bayes-opt-max-samples", type=int)
    p.add_argument("--autotune-gaussian-process-noise", type=float)
    p.add_argument("--stall-check-warning-time-seconds", type=float)
    p.add_argument("--stall-check-shutdown-time-seconds", type=float)
    p.add_argument("--no-stall-check", action="store_true")
    p.add_argument("--log-level", type=str.lower, choices=["trace", "debug", "info", "warning", "error"])
    p.add_argument("--config-file", help="horovodrun-style YAML file; command-line flags win")
    p.add_argument("--mpi-args", default="", help="extra arguments passed to mpirun verbatim")
    p.add_argument("--output-filename", help="directory: also write each rank's output to rank.<N>.log there")
    p.add_argument("--start-timeout", type=int)
    p.add_argument("--network-interface", help="NIC(s) for MPI traffic, e.g. eth0 or eth0,eth1")
    p.add_argument("-p", "--ssh-port", type=int)
    p.add_argument("-i", "--ssh-identity-file")
    p.add_argument("--mpi", action="store_true", help="use MPI (the only controller tfring has)")
    p.add_argument("--gloo", action="store_true")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--check-build", action="store_true", help="print what this tfring was built with")
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def _scalar(text):
    text = text.strip().strip("'\"")
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def read_config_file(path):
    """The two-level `section:\\n  key: value` YAML that horovodrun's --config-file uses (no PyYAML needed)."""
    values, section = {}, None
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            key, sep, value = line.strip().partition(":")
            if not sep:
                raise ValueError("--config-file %s:%d: expected 'key: value', got %r" % (path, lineno, raw.strip()))
            if not raw.startswith((" ", "\t")):
                section = key if not value.strip() else None
                if section is None:
                    if key != "verbose":
                        raise ValueError("--config-file %s:%d: unknown top-level key %r" % (path, lineno, key))
                    values["verbose"] = bool(_scalar(value))
                elif section not in CONFIG_KEYS:
                    raise ValueError("--config-file %s:%d: unknown section %r" % (path, lineno, section))
                continue
            dest = CONFIG_KEYS.get(section, {}).get(key)
            if dest is None:
                raise ValueError("--config-file %s:%d: unknown key %r in section %r" % (path, lineno, key, section))
            values[dest] = _scalar(value)
    return values


def apply_config_file(args):
    """Fills flags the command line left unset from the config file."""
    if not args.config_file:
        return args
    for dest, value in read_config_file(args.config_file).items():
        if dest == "stall_check_enabled":
            args.no_stall_check = args.no_stall_check or not value
        elif getattr(args, dest, None) in (None, False):
            setattr(args, dest, value if value is not False else None)
    return args


def knob_env(args):
    env = {}
    for flag, (knob, conv) in KNOB_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            env[knob] = conv(value)
    if args.disable_cache:
        env["TFRING_CACHE_CAPACITY"] = "0"
    if args.no_stall_check:
        env["TFRING_STALL_CHECK_DISABLE"] = "1"
    return env
