"""horovodrun's command line (0.28.1: every flag, with its single-dash aliases); checks.py says what the flags
mean (tfring's knob table, refusals, the elastic defaults). The flags that set a TFRING_* knob come from the knob
table (tfring.common.knobs): its rows give their spelling, --help line and type."""
import argparse

from tfring.common import knobs

LOG_LEVELS = ["trace", "debug", "info", "warning", "error", "fatal"]
DEFAULT_SLOTS = 1  # --slots-per-host


class UsageError(Exception):
    """A bad command line or config file: tfringrun prints one line and exits 2 (no usage dump)."""


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, no usage dump) instead of exiting."""

    def error(self, message):
        """Raises the parse error as a UsageError.

        Args:
            message: argparse's message.

        Raises:
            UsageError: always.
        """
        raise UsageError(" ".join(message.split()) + " (tfringrun --help lists the flags)")


class _Version(argparse.Action):
    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kw.get("help"))

    def __call__(self, parser, namespace, values, option_string=None):
        from tfring.runner.info import version_text
        print(version_text())
        parser.exit(0)


class _Nics(argparse.Action):
    """--network-interfaces eth0,eth1 and (repeatable) --network-interface eth0: one ordered union, as Horovod."""

    def __call__(self, parser, namespace, values, option_string=None):
        nics = list(getattr(namespace, self.dest) or [])
        for nic in values.split(","):
            if nic.strip() and nic.strip() not in nics:
                nics.append(nic.strip())
        setattr(namespace, self.dest, nics)


def _pair(group, on, off, dest, help_on, help_off=argparse.SUPPRESS):
    """--x / --no-x as in horovodrun: True / False, None when neither is given (so a config file may set it)."""
    g = group.add_mutually_exclusive_group()
    g.add_argument(on, dest=dest, action="store_const", const=True, default=None, help=help_on)
    g.add_argument(off, dest=dest, action="store_const", const=False, default=None, help=help_off)


def _knob_flags(group, title):
    """Adds the flags of the knob table's rows listed under `title`."""
    for k in knobs.launcher_knobs():
        if k.group != title:
            continue
        helps = k.flag_help.split("|")
        helps[0] += " (%s)" % k.name
        if "|" in k.flag:  # a boolean's --on|--off pair
            on, off = k.flag.split("|")
            _pair(group, on, off, knobs.dest(k), helps[0], (helps + [argparse.SUPPRESS])[1])
        elif k.type == "level":
            group.add_argument(k.flag, type=str.lower, choices=LOG_LEVELS, help=helps[0])
        else:
            group.add_argument(k.flag, type=knobs.flag_type(k), help=helps[0])


def build_parser():
    """tfringrun's argument parser: every horovodrun 0.28.1 flag.

    Returns:
        Parser
    """
    # Every default is None: a value still None after parsing was not on the command line (the config file
    # may then set it; command-line flags always win).
    p = Parser(prog="tfringrun", description="Launch a tfring (Horovod-style) job over Open MPI's mpirun.",
               usage="tfringrun [-np N] [-H hosts | -hostfile FILE] [flags] command ...")
    p.add_argument("-v", "--version", action=_Version, help="print tfring's, TensorFlow's and Open MPI's versions")
    p.add_argument("-np", "--num-proc", dest="np", type=int, help="number of processes (default: the hosts' slots)")
    p.add_argument("-cb", "--check-build", action="store_true", help="print what this tfring was built with")
    p.add_argument("--disable-cache", action="store_true", default=None,
                   help="accepted; tfringrun keeps no cache of start-up checks")
    p.add_argument("--start-timeout", type=int, help="seconds for every rank to start (default "
                   "$TFRING_START_TIMEOUT / $HOROVOD_START_TIMEOUT, else 30 with remote hosts, else none)")
    p.add_argument("--network-interfaces", "--network-interface", dest="nics", action=_Nics,
                   help="NICs (or CIDR subnets) for MPI traffic, e.g. eth0,eth1; --network-interface repeats")
    p.add_argument("--output-filename", help="directory: also write each rank's tagged output to rank.<N>.log")
    p.add_argument("--verbose", action="store_true", default=None, help="print the mpirun command")
    p.add_argument("--config-file", help="horovodrun-style YAML file; command-line flags win")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command every rank runs")

    g = p.add_argument_group("SSH arguments")
    g.add_argument("-p", "--ssh-port", type=int, help="ssh port on every host")
    g.add_argument("-i", "--ssh-identity-file", help="ssh private key file")

    g = p.add_argument_group("tunable parameter arguments")
    _knob_flags(g, "tunable parameter arguments")
    _pair(g, "--torus-allreduce", "--no-torus-allreduce", "torus_allreduce",
          "not built (refused); --no-torus-allreduce is accepted", "accepted")

    g = p.add_argument_group("autotune arguments")
    _knob_flags(g, "autotune arguments")
    for flag, typ in (("--autotune-steps-per-sample", int), ("--autotune-bayes-opt-max-samples", int),
                      ("--autotune-gaussian-process-noise", float)):
        g.add_argument(flag, type=typ, help="Horovod's Bayesian-optimisation knob: accepted and ignored (tfring's "
                       "autotuner has no counterpart; tfringrun says so in one line)")

    g = p.add_argument_group("elastic arguments (on with --min-np, --max-np or --host-discovery-script)")
    g.add_argument("--min-np", "--min-num-proc", dest="min_num_proc", type=int,
                   help="fewest processes the job goes on with after failures (default -np)")
    g.add_argument("--max-np", "--max-num-proc", dest="max_num_proc", type=int,
                   help="most processes the job grows to when hosts are added (default: no limit)")
    g.add_argument("--slots-per-host", dest="slots", type=int,
                   help="slots of a discovered host listed without :slots (default %d)" % DEFAULT_SLOTS)
    g.add_argument("--elastic-timeout", type=int, help="seconds to wait for --min-np slots at the start or after "
                   "a failure (default $TFRING_ELASTIC_TIMEOUT / $HOROVOD_ELASTIC_TIMEOUT, else %s)"
                   % knobs.row("TFRING_ELASTIC_TIMEOUT").default)
    g.add_argument("--reset-limit", type=int, help="most resets (failures and growths) before the job ends "
                   "(default: no limit)")
    g.add_argument("--blacklist-cooldown-range", dest="cooldown_range", type=int, nargs=2, metavar=("MIN", "MAX"),
                   help="a blacklisted host comes back after a random MIN..MAX seconds (default: never)")
    g.add_argument("--commit-dir", help="tfring: every elastic state commit is also written there in the background, "
                   "and a job started again with it resumes from the newest one (any job using hvd.elastic.run; "
                   "$TFRING_COMMIT_DIR)")

    for title in ("timeline arguments", "monitoring arguments", "stall check arguments"):
        _knob_flags(p.add_argument_group(title), title)

    g = p.add_argument_group("library arguments")
    _pair(g, "--mpi-threads-disable", "--no-mpi-threads-disable", "mpi_threads_disable",
          "initialise MPI with MPI_THREAD_SERIALIZED instead of MPI_THREAD_MULTIPLE")
    g.add_argument("--mpi-args", help='extra mpirun arguments, e.g. --mpi-args="--map-by ppr:2:node"')
    g.add_argument("--tcp", dest="tcp_flag", action="store_true", default=None,
                   help="MPI over TCP (and shared memory within a host) only; NCCL_IB_DISABLE=1")
    g.add_argument("--binding-args", help='mpirun binding arguments instead of "--bind-to none"')
    g.add_argument("--num-nccl-streams", type=int, help="1 accepted (tfring's one stream); more are refused")
    g.add_argument("--thread-affinity", type=int, help="not built (refused)")
    g.add_argument("--gloo-timeout-seconds", type=int, help="accepted and ignored: Gloo only")

    g = p.add_argument_group("logging arguments")
    _knob_flags(g, "logging arguments")
    g = g.add_mutually_exclusive_group()
    g.add_argument("--log-with-timestamp", dest="log_with_timestamp", action="store_const", const=True,
                   default=None, help="timestamp tfring's backend log lines and tfringrun's own messages")
    g.add_argument("--log-without-timestamp", dest="log_with_timestamp", action="store_const", const=False,
                   help="no timestamps on them (the default)")
    g.add_argument("--log-hide-timestamp", dest="log_with_timestamp", action="store_const", const=False,
                   help=argparse.SUPPRESS)
    g.add_argument("--no-log-hide-timestamp", dest="log_with_timestamp", action="store_const", const=True,
                   help=argparse.SUPPRESS)

    # Horovod puts this in the same exclusive group as --log-without-timestamp; nothing stops using both here.
    p.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp", dest="prefix_output_with_timestamp",
                   action="store_true", default=None, help="timestamp every line (and \\r update) of output")

    g = p.add_argument_group("host arguments").add_mutually_exclusive_group()
    g.add_argument("-H", "--hosts", help="host1:slots,host2:slots (default localhost:<np>)")
    g.add_argument("-hostfile", "--hostfile", help="file of 'host slots=N' lines")
    g.add_argument("--host-discovery-script", help="elastic training: an executable printing one 'host:slots' "
                   "(or 'host') line per available host; polled every second")

    g = p.add_argument_group("controller arguments").add_mutually_exclusive_group()
    g.add_argument("--gloo", dest="use_gloo", action="store_true", default=None, help="not built (refused)")
    g.add_argument("--mpi", dest="use_mpi", action="store_true", default=None, help="accepted: tfring runs on MPI")
    g.add_argument("--jsrun", dest="use_jsrun", action="store_true", default=None, help="not built (refused)")
    return p
