"""tfringrun -np 4 -H localhost:4 python train.py: runs the mpirun of the MPI tfring was built with, adding
what Open MPI needs so a user never sees a setup error (root, more ranks than cores, core binding), forwards
the environment to every host, relays output tagged by rank like horovodrun, forwards Ctrl-C/SIGTERM and
reports which rank failed."""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

from tfring.runner.config import apply_config_file
from tfring.runner.env import export_args
from tfring.runner.flags import DEFAULT_ELASTIC_TIMEOUT, UsageError, build_parser, check, is_elastic, knob_env
from tfring.runner.hosts import parse_hostfile, parse_hosts
from tfring.runner.info import check_build, mpirun_path
from tfring.runner.output import STARTED, Relay, failure_summary, lost_host, stamp

LOCAL_NAMES = ("localhost", "127.0.0.1")
# Fail within seconds (not ~8 minutes) when a link between hosts dies: TCP keepalive on PRRTE's daemons.
KEEPALIVE = ["--mca", "oob_tcp_keepalive_time", "3", "--mca", "oob_tcp_keepalive_intvl", "1",
             "--mca", "oob_tcp_keepalive_probes", "3"]
# --tcp: point-to-point over the TCP BTL only (shared memory within a host stays: it is not a network).
TCP_ONLY = ["--mca", "pml", "ob1", "--mca", "btl", "tcp,sm,self"]
DEFAULT_START_TIMEOUT = 30
ELASTIC = "TFRING_ELASTIC"  # and TFRING_ELASTIC_DRIVER, _SECRET, ... (tfring.common.signed_channel's names)


def parse(argv):
    """Command line + config file -> checked args.

    Args:
        argv: the arguments (default sys.argv[1:]).

    Returns:
        argparse.Namespace

    Raises:
        UsageError: any problem, in one line.
    """
    args = apply_config_file(build_parser().parse_args(argv))
    check(args)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


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
    for name in ("TFRING_START_TIMEOUT", "HOROVOD_START_TIMEOUT"):
        if environ.get(name):
            try:
                return int(environ[name])
            except ValueError:
                raise UsageError("%s=%r: expected a whole number of seconds" % (name, environ[name]))
    return DEFAULT_START_TIMEOUT if remote else 0


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
    """Seconds an elastic job waits for --min-np slots: --elastic-timeout, else $HOROVOD_ELASTIC_TIMEOUT, else 600
    (horovodrun's default).

    Args:
        args: parsed arguments.
        environ: the launcher's environment.

    Returns:
        int: seconds.

    Raises:
        UsageError: a malformed $HOROVOD_ELASTIC_TIMEOUT.
    """
    if args.elastic_timeout is not None:
        return args.elastic_timeout
    value = environ.get("HOROVOD_ELASTIC_TIMEOUT")
    if value:
        try:
            return int(value)
        except ValueError:
            raise UsageError("HOROVOD_ELASTIC_TIMEOUT=%r: expected a whole number of seconds" % value) from None
    return DEFAULT_ELASTIC_TIMEOUT


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
        nics = ",".join(args.nics)
        cmd += ["--mca", "btl_tcp_if_include", nics, "--mca", "oob_tcp_if_include", nics]
        if not any("/" in n for n in args.nics):  # NCCL takes names only, not subnets
            env.setdefault("NCCL_SOCKET_IFNAME", nics)  # as horovodrun
    ssh = []
    if args.ssh_port:
        ssh += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        ssh += ["-i", args.ssh_identity_file]
    if ssh:
        cmd += ["--prtemca", "plm_ssh_args", " ".join(ssh)]
    env.update(knob_env(args))
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
    env = {k: v for k, v in (os.environ if environ is None else environ).items() if not k.startswith(ELASTIC)}
    env.update({
        ELASTIC: "1", ELASTIC + "_DRIVER": address, ELASTIC + "_SECRET": secret,
        ELASTIC + "_MIN_NP": str(args.min_num_proc), ELASTIC + "_MAX_NP": str(args.max_num_proc or 0),
        ELASTIC + "_TIMEOUT": str(elastic_timeout(args, env)),
        ELASTIC + "_RESET_LIMIT": str(-1 if args.reset_limit is None else args.reset_limit),
        ELASTIC + "_COMMAND": json.dumps(rank_command(args)),  # what new ranks run (MPI_Comm_spawn)
        ELASTIC + "_DISCOVERY": "1" if args.host_discovery_script else "0",  # hosts may come: commits go to disk
    }, **(extra_env or {}))
    sub = argparse.Namespace(**vars(args))
    sub.hosts, sub.hostfile, sub.np = ",".join("%s:%d" % h for h in hosts), None, np_
    cmd, env = plan(sub, env)
    args.start_deadline, args.num_ranks = sub.start_deadline, sub.num_ranks
    # Slots are the driver's books: MPI_Comm_spawn must not be refused for a host PRRTE thinks is full.
    extra = [] if "--oversubscribe" in cmd else ["--oversubscribe"]
    return cmd[:1] + ["--with-ft", "ulfm"] + extra + cmd[1:], env


def build_command(args, environ=None):
    """plan()'s command alone.

    Args:
        args: parsed arguments.
        environ: the launcher's environment (default os.environ).

    Returns:
        list: the mpirun command.
    """
    return plan(args, environ)[0]


def kill_session(sid):
    """SIGKILLs every process of session `sid` (mpirun's: it starts one), whatever process groups they made: the
    ranks of an mpirun that died would otherwise run on, orphaned, holding the output pipes (Linux /proc).

    Args:
        sid: the session id (mpirun's pid).
    """
    for pid in [int(e) for e in os.listdir("/proc") if e.isdigit()] if os.path.isdir("/proc") else []:
        try:
            if os.getsid(pid) == sid:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def descendants(pid):
    """Every process below pid (Linux /proc; empty elsewhere).

    Args:
        pid: a process id.

    Returns:
        list: process ids.
    """
    children = {}
    for entry in [e for e in os.listdir("/proc") if e.isdigit()] if os.path.isdir("/proc") else []:
        try:
            with open("/proc/%s/stat" % entry) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def run_command(cmd, output_dir=None, stdout=None, stderr=None, env=None, timestamp_output=False,
                timestamp_logs=False, start_timeout=0, num_ranks=0, report=None, finished=None):
    """Runs mpirun; returns its exit code. SIGINT/SIGTERM stop every rank (SIGKILL after 5 s), as does a rank
    that has not started within start_timeout seconds (the command must then be wrapped by plan()).

    Args:
        cmd: the mpirun command.
        output_dir: --output-filename directory, or None.
        stdout: where ranks' stdout goes (default sys.stdout).
        stderr: where ranks' stderr and tfringrun's lines go (default sys.stderr).
        env: mpirun's environment.
        timestamp_output: timestamp every line of output.
        timestamp_logs: timestamp tfringrun's own lines.
        start_timeout: seconds every rank has to announce its start (0: no deadline).
        num_ranks: ranks expected to announce.
        report: a dict that receives "lost_host" (the host PRRTE lost, or None), or None.
        finished: callable(rc) -> str or None: for a failed mpirun, a line saying the job finished all the same
            (every rank reported success; elastic mode), then the exit code is 0.

    Returns:
        int: mpirun's exit code (128 + signal when stopped by one).
    """
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, env=env,
                            start_new_session=True)
    relay = Relay(output_dir, timestamp_output, timestamp_logs)
    stopping, late = [], []

    def kill():
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # mpirun forwards it to every rank
        except ProcessLookupError:
            pass

        def escalate():  # mpirun waiting on a stuck ssh ignores SIGTERM
            time.sleep(5)
            if proc.poll() is None:
                # Its ssh children run in their own process groups: take them too, before they are orphaned.
                for pid in [proc.pid] + descendants(proc.pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        threading.Thread(target=escalate, daemon=True).start()

    def stop(signum, _frame):
        stopping.append(signum)
        kill()

    def watch_start():
        if not relay.all_started.wait(start_timeout) and proc.poll() is None:
            late.extend(sorted(set(range(num_ranks)) - relay.started))
            kill()

    if start_timeout:
        relay.expected = num_ranks
        threading.Thread(target=watch_start, daemon=True).start()
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    threads = [threading.Thread(target=relay.pump, args=(proc.stdout, stdout), daemon=True),
               threading.Thread(target=relay.pump, args=(proc.stderr, stderr), daemon=True)]
    for t in threads:
        t.start()
    rc = proc.wait()
    if rc < 0:  # mpirun itself died of a signal (not ours: that gives 128 + n): take the ranks it left behind
        kill_session(proc.pid)
    for t in threads:
        t.join(timeout=5)
    relay.close()
    if main_thread:
        for s, h in old.items():
            signal.signal(s, h)

    def say(msg):
        stderr.write("%stfringrun: %s\n" % (stamp() + " " if timestamp_logs else "", msg))
    if stopping:
        say("stopped by signal %d" % stopping[0])
        return 128 + stopping[0]
    if late:
        say("rank%s %s of %d did not start within %d s (--start-timeout); check that ssh to every host works "
            "without a prompt and that the hosts reach each other; the job was stopped" % (
                "s" if len(late) > 1 else "", ",".join(map(str, late)), num_ranks, start_timeout))
        return rc if rc > 0 else 1
    if report is not None:  # the elastic driver restarts the job without a host PRRTE lost
        report["lost_host"] = lost_host(relay.untagged) if not stopping else None
    if rc == 0 and lost_host(relay.untagged):
        rc = 1  # PRRTE exits 0 when it loses a host; the job did not finish
    excuse = finished(rc) if rc != 0 and finished is not None and not lost_host(relay.untagged) else None
    if excuse:
        say(excuse)
        return 0
    if rc != 0:
        summary = failure_summary(rc, relay.untagged)
        if relay.shutdown_by is not None:
            # The first rank to fail may only be a victim: say who ended tfring first.
            summary += " (tfring had been shut down by rank %s: it exited or called shutdown() first)" % \
                relay.shutdown_by
        say(summary)
    return rc


def main(argv=None):
    """tfringrun's entry point.

    Args:
        argv: the arguments (default sys.argv[1:]).

    Returns:
        int: 0 after --check-build.

    Raises:
        SystemExit: with the job's exit code (2 on a usage error).
    """
    try:
        args = parse(argv)
        if args.check_build:
            check_build()
            return 0
        if not args.command:
            raise UsageError("no command to run (e.g. tfringrun -np 2 python train.py)")
        if is_elastic(args):
            from tfring.runner.elastic_driver import run_elastic
            sys.exit(run_elastic(args))
        cmd, env = plan(args)
    except UsageError as e:
        sys.stderr.write("tfringrun: %s\n" % e)
        sys.exit(2)
    if args.verbose:
        print("tfringrun: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    sys.exit(run_command(cmd, args.output_filename, env=env, timestamp_output=bool(args.prefix_output_with_timestamp),
                         timestamp_logs=bool(args.log_with_timestamp), start_timeout=args.start_deadline,
                         num_ranks=args.num_ranks))


if __name__ == "__main__":
    main()
