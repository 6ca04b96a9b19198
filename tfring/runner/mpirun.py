"""The mpirun command line of a job: the mpirun of the MPI tfring was built with, plus what Open MPI needs so a user
never sees a setup error (root, more ranks than cores, core binding), the launcher's environment forwarded to every
host, the flags' knobs, and for an elastic job ULFM and the ranks' side of the launcher<->rank contract
(tfring.common.launch_env)."""
import argparse
import ipaddress
import json
import os
import shlex
import socket
import sys

from tfring.common import knobs, launch_env
from tfring.runner.checks import knob_env, metrics_env
from tfring.runner.env import export_args
from tfring.runner.flags import UsageError
from tfring.runner.hosts import parse_hostfile, parse_hosts
from tfring.runner.info import mpirun_path
from tfring.runner.output import STARTED

LOCAL_NAMES = ("localhost", "127.0.0.1")
# Fail within seconds (not ~8 minutes) when a link between hosts dies: TCP keepalive on PRRTE's daemons.
KEEPALIVE = ["--mca", "oob_tcp_keepalive_time", "3", "--mca", "oob_tcp_keepalive_intvl", "1",
             "--mca", "oob_tcp_keepalive_probes", "3"]
# An elastic job whose stall deadline is at most this many seconds survives a cut link in place: at the deadline the
# survivors declare the ranks beyond it failed (docs/elastic.md). PRRTE ends the whole job once its keepalive loses
# a host's daemon, so such a job runs without it; with a longer deadline the keepalive's restart comes sooner.
IN_PLACE_DEADLINE = 60
# --tcp: point-to-point over the TCP BTL only (shared memory within a host stays: it is not a network).
TCP_ONLY = ["--mca", "pml", "ob1", "--mca", "btl", "tcp,sm,self"]
# Elastic jobs: ULFM (survivors see a dead rank as an error instead of being killed), with only the collective
# components Open MPI's own ULFM settings (amca-param-sets/ft-mpi) list as tested with failures: base/basic, tuned,
# ftagree, libnbc. han (its hierarchical collectives, priority 35: chosen across hosts) and adapt, whose non-blocking
# steps it runs on, are not: after a rank died inside a transfer across emulated hosts, han's aborted schedules
# printed `NBC_Progress: an error 75 ...` 443 times on one rank, and han creates its sub-communicators lazily inside
# the first collective on a communicator (an MPI_Comm_split_type), where survivors were once seen hanging against a
# peer in a plain MPI_Allgather (docs/elastic.md). tfring's own hierarchical collectives stay available.
ULFM = ["--with-ft", "ulfm", "--mca", "coll", "^hcoll,portals4,han,adapt"]
DEFAULT_REMOTE_START_TIMEOUT = 30  # horovodrun's; with no remote host there is none (the knob left unset)


def start_timeout(args, environ, remote):
    """Seconds every rank has to start: the flag, else $TFRING_START_TIMEOUT / $HOROVOD_START_TIMEOUT, else 30 when
    there are remote hosts (horovodrun's default; an unreachable host otherwise hangs mpirun) and none locally.

    Args:
        args: parsed arguments.
        environ: the launcher's environment.
        remote: whether any host is remote.

    Returns:
        int: seconds (0: no deadline).

    Raises:
        UsageError: a malformed environment value.
    """
    if args.start_timeout is not None:
        return args.start_timeout
    seconds = whole_seconds("TFRING_START_TIMEOUT", environ)
    if seconds is not None:
        return seconds
    return DEFAULT_REMOTE_START_TIMEOUT if remote else 0


def whole_seconds(knob, environ):
    """A knob of whole seconds from the environment (or its HOROVOD_ name), else its table default; None when
    neither gives one.

    Raises:
        UsageError: a malformed value, naming the variable.
    """
    value, var = knobs.value(knob, environ)
    if value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError("%s=%r: expected a whole number of seconds" % (var or knob + " (default)", value)) from None


def host_list(args):
    """The hosts of -H or --hostfile.

    Args:
        args: parsed arguments.

    Returns:
        list | None: [(host, slots), ...], None when neither flag is given.

    Raises:
        UsageError: both flags, an unreadable file or a malformed entry.
    """
    if args.hosts and args.hostfile:
        raise UsageError("pass -H/--hosts or -hostfile/--hostfile, not both")
    try:
        return parse_hostfile(args.hostfile) if args.hostfile else parse_hosts(args.hosts) if args.hosts else None
    except OSError as e:
        raise UsageError("--hostfile %s: cannot read it: %s" % (args.hostfile, e.strerror or e))
    except ValueError as e:
        raise UsageError(str(e))


def elastic_timeout(args, environ):
    """Seconds an elastic job waits for --min-np slots: --elastic-timeout, else $TFRING_ELASTIC_TIMEOUT /
    $HOROVOD_ELASTIC_TIMEOUT, else the table's 600 (horovodrun's default).

    Args:
        args: parsed arguments.
        environ: the launcher's environment.

    Returns:
        int: seconds.

    Raises:
        UsageError: a malformed $TFRING_ELASTIC_TIMEOUT / $HOROVOD_ELASTIC_TIMEOUT.
    """
    if args.elastic_timeout is not None:
        return args.elastic_timeout
    return whole_seconds(launch_env.ELASTIC_TIMEOUT, environ)


def is_loopback(nic):
    """Whether an interface name (on this host) or a CIDR subnet is the loopback.

    Args:
        nic: e.g. "lo", "eth0", "127.0.0.0/8".

    Returns:
        bool
    """
    if "/" in nic:
        try:
            return ipaddress.ip_network(nic, strict=False).is_loopback
        except ValueError:
            return False
    try:
        with open("/sys/class/net/%s/flags" % nic) as f:
            return bool(int(f.read(), 16) & 0x8)  # IFF_LOOPBACK
    except (OSError, ValueError):
        return nic == "lo"


def is_this_host(host):
    """Whether a host name of -H names the launching host (Open MPI then starts no daemon there).

    Args:
        host: e.g. "localhost", "node1".

    Returns:
        bool
    """
    name = socket.gethostname()
    return host in LOCAL_NAMES or host in (name, name.split(".")[0])  # no DNS lookup: it may hang offline


def nic_args(nics, hosts):
    """mpirun's arguments for --network-interface(s): the ranks' TCP traffic (btl_tcp_if_include, as horovodrun)
    and, when the job spans hosts, PRRTE's daemons' too (oob_tcp_if_include).

    PRRTE's out-of-band channel never uses a loopback interface: a loopback-only list leaves it none and mpirun
    exits 213 ("No network interfaces were found for out-of-band communications"). On one host there is no remote
    daemon to reach, so the daemons keep their default there; the ranks' TCP BTL takes `lo` (shared memory carries
    a host's traffic anyway). horovodrun on one host itself passes the interfaces with 127.0.0.1 (`lo`).

    Args:
        nics: the interface names or CIDR subnets, in order.
        hosts: the host names of -H/--hostfile (empty: localhost).

    Returns:
        list: mpirun arguments.

    Raises:
        UsageError: a loopback-only list for a job on other hosts (it cannot reach them).
    """
    joined = ",".join(nics)
    cmd = ["--mca", "btl_tcp_if_include", joined]
    others = [h for h in hosts if not is_this_host(h)]
    if not others:
        return cmd
    if all(is_loopback(n) for n in nics):
        raise UsageError("--network-interface %s: the loopback interface cannot reach the other hosts (%s); name an "
                         "interface or subnet they share, or drop the flag" % (joined, ",".join(others)))
    return cmd + ["--mca", "oob_tcp_if_include", joined]


def rank_command(args):
    """The command every rank execs: args.command with a bare `python`/`python3` made the interpreter tfring is
    installed in (even when its venv is not activated).

    Args:
        args: parsed arguments.

    Returns:
        list: the command (not wrapped by the start announcement).
    """
    command = list(args.command)
    if command[:1] and command[0] in ("python", "python3"):
        command[0] = sys.executable
    return command


def ssh_args(args):
    """The ssh options of the launches: -p PORT (--ssh-port), -i FILE (--ssh-identity-file)."""
    out = []
    if args.ssh_port:
        out += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        out += ["-i", args.ssh_identity_file]
    return out


# glibc serves allocations above its mmap ceiling (32 MiB at most: a large collective's output, XLA's and
# TensorFlow's buffers) as fresh mappings, page-faulted 4 KiB at a time on every use: 24,589 faults and 59 ms of
# kernel time per call for a jitted JAX all-gather of 100 MB at np=2 here. With transparent huge pages on madvise
# (the kernels' default), glibc's hugetlb=1 asks for 2 MiB pages there: 572 faults, the call 87 -> 31 ms
# (docs/benchmarks.md). The ranks get it unless GLIBC_TUNABLES already says hugetlb (glibc < 2.35 ignores it).
HUGE_PAGES = "glibc.malloc.hugetlb=1"


def huge_pages(tunables):
    """GLIBC_TUNABLES for the ranks: the given ones, with glibc.malloc.hugetlb=1 unless they set hugetlb.

    Args:
        tunables: the launcher's GLIBC_TUNABLES, or None.

    Returns:
        str
    """
    if tunables and "glibc.malloc.hugetlb" in tunables:
        return tunables
    return tunables + ":" + HUGE_PAGES if tunables else HUGE_PAGES


def plan(args, environ=None):
    """The mpirun command line and its environment for parsed args.

    Args:
        args: parsed arguments (start_deadline and num_ranks are set on it for run_command).
        environ: the launcher's environment (default os.environ).

    Returns:
        tuple: (command list, environment dict).

    Raises:
        UsageError: no -np and no hosts, or a bad host list.
    """
    env = dict(os.environ if environ is None else environ)
    hosts = host_list(args)
    np_ = args.np or (sum(s for _, s in hosts) if hosts else None)
    if not np_:
        raise UsageError("-np: give the number of processes (or -H/--hostfile to use all their slots)")
    slots = sum(s for _, s in hosts) if hosts else np_
    local_only = not hosts or all(h in LOCAL_NAMES for h, _ in hosts)
    cmd = [mpirun_path(), "-np", str(np_), "--output", "tag",
           "--host", ",".join("%s:%d" % h for h in hosts) if hosts else "localhost:%d" % np_]
    cmd += shlex.split(args.binding_args) if args.binding_args else ["--bind-to", "none"]
    if np_ > slots or (local_only and np_ > (os.cpu_count() or 1)):
        cmd += ["--oversubscribe"]
    if os.geteuid() == 0:
        cmd += ["--allow-run-as-root"]
    if not local_only:
        cmd += KEEPALIVE
    if args.tcp_flag:
        cmd += TCP_ONLY
    if args.nics:
        cmd += nic_args(args.nics, [h for h, _ in hosts or []])
        if not any("/" in n for n in args.nics):  # NCCL takes names only, not subnets
            env.setdefault("NCCL_SOCKET_IFNAME", ",".join(args.nics))  # as horovodrun
    ssh = ssh_args(args)
    if ssh:
        cmd += ["--prtemca", "plm_ssh_args", " ".join(ssh)]
    env.update(knob_env(args))
    env.update(metrics_env(env))
    env["GLIBC_TUNABLES"] = huge_pages(env.get("GLIBC_TUNABLES"))
    if getattr(args, "commit_dir", None):
        env["TFRING_COMMIT_DIR"] = args.commit_dir  # (the knob table's row; the flag wins)
    command = rank_command(args)
    # Open MPI's --spawn-timeout does not cover daemons stuck in ssh: each rank announces its start instead (one
    # line on stderr that the relay swallows) before exec'ing the command.
    args.start_deadline, args.num_ranks = start_timeout(args, env, not local_only), np_
    if args.start_deadline:
        command = ["/bin/sh", "-c", 'echo %s >&2; exec "$@"' % STARTED.decode(), "tfringrun"] + command
    cmd += export_args(env)  # every variable reaches the ranks on every host, as with horovodrun
    cmd += shlex.split(args.mpi_args or "")
    return cmd + command, env


def plan_elastic(args, hosts, np_, address, secret, environ=None, extra_env=None):
    """plan() for an elastic job on the given hosts, plus `mpirun --with-ft ulfm` (ULFM: survivors see a dead rank
    as an error instead of being killed) and the ranks' TFRING_ELASTIC_* variables. The secret goes into the
    environment only: mpirun forwards it by name (-x), so its value is never on a command line.

    Args:
        args: parsed arguments (start_deadline and num_ranks are set on it, as plan does).
        hosts: [(host, slots), ...] to start on.
        np_: ranks to start.
        address: the elastic driver's "host:port".
        secret: the job's secret (tfring.common.signed_channel.new_secret()).
        environ: the launcher's environment (default os.environ); TFRING_ELASTIC_* values in it (an outer job's) are
            dropped.
        extra_env: more variables for the ranks (e.g. TFRING_ELASTIC_* of a restart), set last.

    Returns:
        tuple: (mpirun command list, its environment dict).
    """
    # Every TFRING_ELASTIC* name starts with launch_env.ELASTIC: an outer job's values are dropped.
    env = {k: v for k, v in (os.environ if environ is None else environ).items()
           if not k.startswith(launch_env.ELASTIC)}
    env.update({
        launch_env.ELASTIC: "1", launch_env.ELASTIC_DRIVER: address, launch_env.ELASTIC_SECRET: secret,
        launch_env.ELASTIC_MIN_NP: str(args.min_num_proc), launch_env.ELASTIC_MAX_NP: str(args.max_num_proc or 0),
        launch_env.ELASTIC_TIMEOUT: str(elastic_timeout(args, env)),
        launch_env.ELASTIC_RESET_LIMIT: str(-1 if args.reset_limit is None else args.reset_limit),
        launch_env.ELASTIC_COMMAND: json.dumps(rank_command(args)),  # what new ranks run (MPI_Comm_spawn)
        # hosts may come: commits go to disk
        launch_env.ELASTIC_DISCOVERY: "1" if args.host_discovery_script else "0",
    }, **(extra_env or {}))
    sub = argparse.Namespace(**vars(args))
    sub.hosts, sub.hostfile, sub.np = ",".join("%s:%d" % h for h in hosts), None, np_
    cmd, env = plan(sub, env)
    args.start_deadline, args.num_ranks = sub.start_deadline, sub.num_ranks
    # Slots are the driver's books: MPI_Comm_spawn must not be refused for a host PRRTE thinks is full.
    extra = [] if "--oversubscribe" in cmd else ["--oversubscribe"]
    return cmd[:1] + ulfm_args(cmd) + extra + in_place(cmd, env)[1:], env


def in_place(cmd, env):
    """plan()'s mpirun command for an elastic job: without PRRTE's keepalive where the job survives a cut link in
    place (survives_cut_links); removed only where plan() put it, as a whole (never a part of the user's args)."""
    at = next((i for i in range(len(cmd)) if cmd[i:i + len(KEEPALIVE)] == KEEPALIVE), None)
    if at is None or not survives_cut_links(env):
        return cmd
    return cmd[:at] + cmd[at + len(KEEPALIVE):]


def survives_cut_links(environ):
    """Whether an elastic job with this environment goes on in place after a cut link (IN_PLACE_DEADLINE)."""
    try:
        seconds = knobs.stall_shutdown_seconds(environ)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return 0 < seconds <= IN_PLACE_DEADLINE


def ulfm_args(cmd):
    """ULFM for the mpirun command `cmd`; the collective components are left to the user where `cmd` names them."""
    chosen = any(a == "coll" and b == "--mca" for b, a in zip(cmd, cmd[1:]))
    return ULFM[:2] if chosen else list(ULFM)


def build_command(args, environ=None):
    """plan()'s command alone.

    Args:
        args: parsed arguments.
        environ: the launcher's environment (default os.environ).

    Returns:
        list: the mpirun command.
    """
    return plan(args, environ)[0]

