"""tfringrun -np 4 -H localhost:4 python train.py: runs the mpirun of the MPI tfring was built with, adding
what Open MPI needs so a user never sees a setup error (root, more ranks than cores, core binding), forwards
the environment to every host, relays output tagged by rank like horovodrun, forwards Ctrl-C/SIGTERM and
reports which rank failed."""
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

from tfring.runner.config import apply_config_file
from tfring.runner.env import export_args
from tfring.runner.flags import UsageError, build_parser, check, knob_env
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


def parse(argv):
    """Command line + config file -> checked args (UsageError on any problem)."""
    args = apply_config_file(build_parser().parse_args(argv))
    check(args)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


def start_timeout(args, environ, remote):
    """Seconds every rank has to start: the flag, else $TFRING_START_TIMEOUT / $HOROVOD_START_TIMEOUT, else 30 when
    there are remote hosts (horovodrun's default; an unreachable host otherwise hangs mpirun) and none locally."""
    if args.start_timeout is not None:
        return args.start_timeout
    for name in ("TFRING_START_TIMEOUT", "HOROVOD_START_TIMEOUT"):
        if environ.get(name):
            try:
                return int(environ[name])
            except ValueError:
                raise UsageError("%s=%r: expected a whole number of seconds" % (name, environ[name]))
    return DEFAULT_START_TIMEOUT if remote else 0


def plan(args, environ=None):
    """(mpirun command line, its environment) for parsed args; environ defaults to os.environ."""
    env = dict(os.environ if environ is None else environ)
    if args.hosts and args.hostfile:
        raise UsageError("pass -H/--hosts or -hostfile/--hostfile, not both")
    try:
        hosts = parse_hostfile(args.hostfile) if args.hostfile else parse_hosts(args.hosts) if args.hosts else None
    except OSError as e:
        raise UsageError("--hostfile %s: cannot read it: %s" % (args.hostfile, e.strerror or e))
    except ValueError as e:
        raise UsageError(str(e))
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
    command = list(args.command)
    if command[:1] and command[0] in ("python", "python3"):
        # A bare `python` means the interpreter tfring is installed in, even when the venv is not activated.
        command[0] = sys.executable
    # Open MPI's --spawn-timeout does not cover daemons stuck in ssh: each rank announces its start instead (one
    # line on stderr that the relay swallows) before exec'ing the command.
    args.start_deadline, args.num_ranks = start_timeout(args, env, not local_only), np_
    if args.start_deadline:
        command = ["/bin/sh", "-c", 'echo %s >&2; exec "$@"' % STARTED.decode(), "tfringrun"] + command
    cmd += export_args(env)  # every variable reaches the ranks on every host, as with horovodrun
    cmd += shlex.split(args.mpi_args or "")
    return cmd + command, env


def build_command(args, environ=None):
    return plan(args, environ)[0]


def descendants(pid):
    """Every process below pid (Linux /proc; empty elsewhere)."""
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
                timestamp_logs=False, start_timeout=0, num_ranks=0):
    """Runs mpirun; returns its exit code. SIGINT/SIGTERM stop every rank (SIGKILL after 5 s), as does a rank
    that has not started within start_timeout seconds (the command must then be wrapped by plan())."""
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
    if rc == 0 and lost_host(relay.untagged):
        rc = 1  # PRRTE exits 0 when it loses a host; the job did not finish
    if rc != 0:
        summary = failure_summary(rc, relay.untagged)
        if relay.shutdown_by is not None:
            # The first rank to fail may only be a victim: say who ended tfring first.
            summary += " (tfring had been shut down by rank %s: it exited or called shutdown() first)" % \
                relay.shutdown_by
        say(summary)
    return rc


def main(argv=None):
    try:
        args = parse(argv)
        if args.check_build:
            check_build()
            return 0
        if not args.command:
            raise UsageError("no command to run (e.g. tfringrun -np 2 python train.py)")
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
