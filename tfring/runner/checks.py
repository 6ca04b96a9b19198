"""What tfringrun's flags mean beyond parsing: each knob flag is one row of the runtime's knob table (TFRING_*
variables for every rank); flags asking for a feature tfring does not build are refused in one line; values and the
elastic flags are checked, and horovodrun's elastic defaults filled in."""
import functools
import os

from tfring.common import knobs, launch_env, metrics_endpoint
from tfring.runner.flags import UsageError, build_parser


def _conversion(knob):
    """The flag's value as the knob's environment value."""
    if "|" in knob.flag:  # the first flag of the pair flips the default
        flipped = "0" if knob.default == "1" else "1"
        return lambda v: flipped if v else knob.default
    if knob.type == "level":
        return lambda v: "error" if v.lower() == "fatal" else v.lower()
    if knob.flag_scale != 1:
        return lambda v: str(int(float(v) * knob.flag_scale))
    return str


# dest -> (TFRING_ knob, conversion), from the knob table's rows that have a flag.
KNOB_FLAGS = {knobs.dest(k): (k.name, _conversion(k)) for k in knobs.launcher_knobs()}

# dest -> (asks for the unbuilt feature?, why it is refused). A value that asks for the feature to be off passes.
REFUSED = {
    "use_gloo": (bool, "the Gloo controller is not built in tfring (it runs on MPI); drop it or pass --mpi"),
    "use_jsrun": (bool, "jsrun/LSF launching is not built in tfring; list the allocation's hosts with -H or "
                        "-hostfile"),
    "torus_allreduce": (bool, "torus allreduce is not built in tfring (it runs a ring allreduce)"),
    "thread_affinity": (lambda v: v is not None, "pinning the background thread to a core is not built in tfring"),
    "num_nccl_streams": (lambda v: v not in (None, 1), "tfring uses one NCCL stream per device; more streams "
                                                       "are not built (pass 1 or drop it)"),
}
# A config file is often shared with Horovod jobs: there a key asking for one of those features is ignored (one
# line says so) instead of refused. dest -> why.
IGNORED_IN_CONFIG = {
    "use_gloo": "the Gloo controller is not built in tfring; the job runs on MPI",
    "torus_allreduce": "torus allreduce is not built in tfring; it runs a ring allreduce",
    "thread_affinity": "pinning the background thread to a core is not built in tfring",
    "num_nccl_streams": "tfring uses one NCCL stream per device",
}
# Accepted (horovodrun's types and ranges) and ignored, one line each: tfring has no counterpart. dest -> why.
IGNORED = {
    "autotune_steps_per_sample": "tfring's autotuner samples by time, not by steps (--autotune-sample-seconds, "
                                 "default 1 s per sample)",
    "autotune_bayes_opt_max_samples": "tfring's autotuner is a coordinate search over a fixed list of fusion "
                                      "thresholds and cycle times, not Bayesian optimisation",
    "autotune_gaussian_process_noise": "tfring's autotuner fits no Gaussian process: a candidate's score is the "
                                       "median of its samples (--autotune-samples-per-candidate)",
    "gloo_timeout_seconds": "it only applies to the Gloo controller; tfring runs on MPI",
}
# The knob flags' accepted ranges, in flag units (the knob table's; the core would clamp, the launcher refuses).
# dest -> (min, max).
RANGES = {knobs.dest(k): (k.min / k.flag_scale, k.max / k.flag_scale) for k in knobs.launcher_knobs()
          if k.type in ("int", "double")}
# horovodrun's other counts and durations.
NONNEGATIVE = ["autotune_steps_per_sample", "autotune_bayes_opt_max_samples", "num_nccl_streams", "thread_affinity",
               "gloo_timeout_seconds", "start_timeout", "elastic_timeout", "reset_limit"]


def _number(x):
    return "%d" % x if x == int(x) else "%g" % x


def flag_name(dest, parser=None):
    """The long flag for an argparse dest (for messages).

    Args:
        dest: the argparse dest, e.g. "min_num_proc".
        parser: the parser (default build_parser()).

    Returns:
        str: e.g. "--min-np".
    """
    for action in (parser or build_parser())._actions:
        if action.dest == dest and action.option_strings:
            longs = [o for o in action.option_strings if o.startswith("--")]
            return (longs or action.option_strings)[0]
    return "--" + dest.replace("_", "-")


def _where(origin, dest):  # the flag or config key that set dest
    return origin.get(dest) or flag_name(dest)


def check(args):
    """Checks parsed arguments (and fills in the elastic defaults, see check_elastic).

    Args:
        args: parsed arguments (after the config file). Sets args.notes: one line per flag or config key that is
            accepted and ignored (tfringrun prints them once, before the job).

    Raises:
        UsageError: naming the flag (or config key) that asks for an unbuilt feature or has a bad value.
    """
    origin = getattr(args, "origin", {})
    where = functools.partial(_where, origin)
    notes = []
    for dest in NONNEGATIVE:
        value = getattr(args, dest, None)
        if value is not None and value < 0:
            raise UsageError("%s: %s must be >= 0" % (where(dest), value))
    for dest, (low, high) in RANGES.items():
        value = getattr(args, dest, None)
        if value is not None and not low <= value <= high:
            bound = ">= %s" % _number(low) if high >= 1e300 else "in [%s, %s]" % (_number(low), _number(high))
            raise UsageError("%s: %s must be %s" % (where(dest), value, bound))
    noise = args.autotune_gaussian_process_noise
    if noise is not None and not 0 <= noise <= 1:
        raise UsageError("%s: %s must be in [0, 1]" % (where("autotune_gaussian_process_noise"), noise))
    for dest, (asks, why) in REFUSED.items():
        value = getattr(args, dest, None)
        if asks(value):
            if dest not in origin:
                raise UsageError("%s: %s" % (where(dest), why))
            notes.append("%s ignored: %s" % (origin[dest], IGNORED_IN_CONFIG[dest]))
            setattr(args, dest, None)
    if args.np is not None and args.np < 1:
        raise UsageError("-np: must be a positive number of processes, got %d" % args.np)
    check_elastic(args, where)
    check_commit_dir(args, where)
    for dest, why in IGNORED.items():
        value = getattr(args, dest, None)
        if value is not None:
            notes.append("%s ignored: %s" % (origin.get(dest) or "%s %s" % (flag_name(dest), value), why))
    args.notes = notes


def metrics_env(env):
    """The ranks' bearer token for rank 0's metrics endpoint when TFRING_METRICS_PORT is set (--metrics-port): read
    from TFRING_METRICS_TOKEN_FILE (--metrics-token-file), written there first (mode 0600) when missing; passed in
    the environment only (mpirun forwards it by name).

    Args:
        env: the ranks' environment (the flags' knob values already in it).

    Returns:
        dict: {TFRING_METRICS_TOKEN: token} or {} (no endpoint).

    Raises:
        UsageError: a bad port, or a token file that cannot be read or written.
    """
    try:
        if not metrics_endpoint.port(env):
            return {}
        return {launch_env.METRICS_TOKEN: metrics_endpoint.token(dict(env, **{launch_env.METRICS_TOKEN: ""}))}
    except ValueError as e:
        raise UsageError(str(e)) from None


def check_commit_dir(args, where=flag_name):
    """--commit-dir: made absolute (the ranks may start elsewhere) and created (mode 0700) when missing.

    Args:
        args: parsed arguments (changed in place).
        where: dest -> the flag (or config key) to name in messages.

    Raises:
        UsageError: the path exists and is not a directory, or cannot be created.
    """
    path = getattr(args, "commit_dir", None)
    if not path:
        return
    args.commit_dir = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(args.commit_dir, mode=0o700, exist_ok=True)
    except OSError as e:
        raise UsageError("%s: %r is not a directory that can be used: %s" % (where("commit_dir"), path, e)) from None


def is_elastic(args):
    """Whether the command line asks for elastic training (as horovodrun: a discovery script or --min-np; also
    --max-np).

    Args:
        args: parsed arguments.

    Returns:
        bool
    """
    return any(getattr(args, d, None) is not None for d in ("host_discovery_script", "min_num_proc", "max_num_proc"))


def check_elastic(args, where=flag_name):
    """Checks the elastic flags and fills in horovodrun's defaults: -np from --min-np and --min-np from -np.

    Args:
        args: parsed arguments (changed in place).
        where: dest -> the flag (or config key) to name in messages.

    Raises:
        UsageError: naming the flag and the value.
    """
    if not is_elastic(args):
        for dest in ("slots", "elastic_timeout", "reset_limit", "cooldown_range"):
            if getattr(args, dest, None) is not None:
                raise UsageError("%s: only used in elastic mode (add --min-np, --max-np or --host-discovery-script)"
                                 % where(dest))
        return
    min_np, max_np = args.min_num_proc, args.max_num_proc
    if min_np is not None and min_np < 1:
        raise UsageError("%s: must be at least 1, got %d" % (where("min_num_proc"), min_np))
    if max_np is not None and max_np < 1:
        raise UsageError("%s: must be at least 1, got %d" % (where("max_num_proc"), max_np))
    if min_np is not None and max_np is not None and min_np > max_np:
        raise UsageError("%s: %d is above --max-np %d" % (where("min_num_proc"), min_np, max_np))
    if args.np is None and min_np is None:
        raise UsageError("%s: elastic mode needs -np or --min-np (the number of processes to start with)"
                         % where("max_num_proc" if args.host_discovery_script is None else "host_discovery_script"))
    args.np = min_np if args.np is None else args.np
    args.min_num_proc = min_np = args.np if min_np is None else min_np
    if args.np < min_np:
        raise UsageError("-np: %d is below --min-np %d" % (args.np, min_np))
    if max_np is not None and args.np > max_np:
        raise UsageError("-np: %d is above --max-np %d" % (args.np, max_np))
    if args.slots is not None and args.slots < 1:
        raise UsageError("%s: must be at least 1, got %d" % (where("slots"), args.slots))
    if args.cooldown_range is not None:
        low, high = args.cooldown_range
        if low < 0 or low > high:
            raise UsageError("%s: %d %d: expected 0 <= MIN <= MAX seconds" % (where("cooldown_range"), low, high))
    script = args.host_discovery_script
    if script is not None:
        what = ("does not exist" if not os.path.exists(script) else "is not a file" if not os.path.isfile(script)
                else "is not executable (chmod +x it)" if not os.access(script, os.X_OK) else None)
        if what:
            raise UsageError("%s %s: %s" % (where("host_discovery_script"), script, what))
        args.host_discovery_script = os.path.abspath(script)


def knob_env(args):
    """The variables the flags set for every rank.

    Args:
        args: parsed arguments.

    Returns:
        dict: {name: value}.
    """
    env = {}
    for dest, (knob, conv) in KNOB_FLAGS.items():
        value = getattr(args, dest)
        if value is not None:
            env[knob] = conv(value)
    if args.mpi_threads_disable:
        # mpi4py initialises MPI; tfring calls MPI from its one background thread after init on the main thread.
        env["MPI4PY_RC_THREAD_LEVEL"] = "serialized"
    if args.tcp_flag:
        env["NCCL_IB_DISABLE"] = "1"  # as horovodrun --tcp
    return env
