"""tfringrun -np 4 -H localhost:4 python train.py: runs the mpirun of the MPI tfring was built with, adding
what Open MPI needs so a user never sees a setup error (root, more ranks than cores, core binding), tags
output lines like horovodrun, forwards Ctrl-C/SIGTERM and reports which rank failed."""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from tfring.runner.flags import NOT_BUILT, apply_config_file, build_parser, knob_env
from tfring.runner.hosts import parse_hostfile, parse_hosts

LOCAL_NAMES = ("localhost", "127.0.0.1")
# Fail within seconds (not ~8 minutes) when a link between hosts dies: TCP keepalive on PRRTE's daemons.
KEEPALIVE = ["--mca", "oob_tcp_keepalive_time", "3", "--mca", "oob_tcp_keepalive_intvl", "1",
             "--mca", "oob_tcp_keepalive_probes", "3"]


def check_build():
    import tfring
    from tfring import _lib
    from mpi4py import MPI
    info = _lib.build_info()
    _, c = _lib.load()
    info["tensorflow"] = c.tfring_built_tf_version().decode()  # compiled into the library itself
    print("\n".join([
        "tfring %s" % tfring.__version__,
        "  built for TensorFlow: %s (running %s)" % (info.get("tensorflow", "unknown"), _tf_version()),
        "  MPI: %s: %s" % (info.get("mpi", "unknown"), MPI.Get_library_version().splitlines()[0].strip()),
        "  NCCL: %s    CUDA: %s    Gloo: no" % ("yes" if tfring.nccl_built() else "no",
                                                "yes" if tfring.cuda_built() else "no"),
        "  ops (CPU kernels): " + " ".join(_registered_ops()),
    ]))


def _tf_version():
    import tensorflow as tf
    return tf.__version__


_OP_NAMES = ["HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather", "HorovodGroupedAllgather",
             "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter", "HorovodGroupedReducescatter",
             "HorovodJoin", "HorovodBarrier", "HorovodSize", "HorovodRank", "HorovodLocalSize", "HorovodLocalRank",
             "HorovodProcessSetIncluded"]


def _registered_ops():
    """The Horovod op names the loaded library really registered (asked from TF's registry)."""
    from tensorflow.python.framework import op_def_registry
    from tfring import _lib
    _lib.load()
    return [n for n in _OP_NAMES if op_def_registry.get(n) is not None]


def mpirun_path():
    here = os.path.join(os.path.dirname(sys.executable), "mpirun")
    return here if os.path.exists(here) else shutil.which("mpirun") or "mpirun"


def build_command(args):
    if args.hosts and args.hostfile:
        raise SystemExit("tfringrun: pass -H/--hosts or --hostfile, not both")
    try:
        hosts = parse_hostfile(args.hostfile) if args.hostfile else parse_hosts(args.hosts) if args.hosts else None
    except (OSError, ValueError) as e:
        raise SystemExit("tfringrun: %s" % e)
    np_ = args.np or (sum(s for _, s in hosts) if hosts else None)
    if not np_ or np_ < 1:
        raise SystemExit("tfringrun: -np must be a positive number of processes, got %r" % (args.np,))
    slots = sum(s for _, s in hosts) if hosts else np_
    local_only = not hosts or all(h in LOCAL_NAMES for h, _ in hosts)
    cmd = [mpirun_path(), "-np", str(np_), "--output", "tag", "--bind-to", "none",
           "--host", ",".join("%s:%d" % h for h in hosts) if hosts else "localhost:%d" % np_]
    if np_ > slots or (local_only and np_ > (os.cpu_count() or 1)):
        cmd += ["--oversubscribe"]
    if os.geteuid() == 0:
        cmd += ["--allow-run-as-root"]
    if not local_only:
        cmd += KEEPALIVE
    if args.network_interface:
        cmd += ["--mca", "btl_tcp_if_include", args.network_interface,
                "--mca", "oob_tcp_if_include", args.network_interface]
    ssh = []
    if args.ssh_port:
        ssh += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        ssh += ["-i", args.ssh_identity_file]
    if ssh:
        cmd += ["--prtemca", "plm_ssh_args", " ".join(ssh)]
    for key in sorted(k for k in os.environ if k.startswith(("TFRING_", "HOROVOD_"))):
        cmd += ["-x", key]  # reaches ranks on remote hosts too
    return cmd + args.mpi_args.split() + args.command


_TAG = re.compile(r"^\[\d+,(\d+)\]<(stdout|stderr)>: ?")
_PEER_SHUTDOWN = re.compile(r"tfring was shut down by rank (\d+)")


class Relay:
    """Rewrites Open MPI's '[job,rank]<stdout>: ' tag to horovodrun's '[rank]<stdout>:' (whole lines only) and
    optionally copies each rank's lines to <dir>/rank.<N>.log."""

    def __init__(self, output_dir):
        self.output_dir = output_dir
        self.files = {}
        self.lock = threading.Lock()
        self.untagged = []  # mpirun's own messages (which rank failed, why)
        self.shutdown_by = None  # a rank whose exit ended tfring on the others
        if output_dir:
            os.makedirs(output_dir, exist_ok=True)

    def _file(self, rank):
        if rank not in self.files:
            self.files[rank] = open(os.path.join(self.output_dir, "rank.%s.log" % rank), "a")
        return self.files[rank]

    def pump(self, stream, out):
        for line in iter(stream.readline, ""):
            m = _TAG.match(line)
            peer = _PEER_SHUTDOWN.search(line)
            with self.lock:
                if peer and self.shutdown_by is None:
                    self.shutdown_by = peer.group(1)
                if m:
                    line = "[%s]<%s>:%s" % (m.group(1), m.group(2), line[m.end():])
                    if self.output_dir:
                        f = self._file(m.group(1))
                        f.write(line)
                        f.flush()
                else:
                    self.untagged.append(line)
                out.write(line)
                out.flush()

    def close(self):
        for f in self.files.values():
            f.close()


def lost_host(untagged):
    """The host PRRTE lost contact with (link cut, host down), or None."""
    text = " ".join(line.strip() for line in untagged)
    if "lost communication with a remote daemon" not in text and "daemon failed to report back" not in text:
        return None
    m = re.search(r"Remote daemon:\s+\S+ on node (\S+)", text) or re.search(r"on node (\S+)", text)
    return m.group(1) if m else "unknown"


def failure_summary(rc, untagged):
    """One line naming the failed rank, its host and its exit code or signal, from mpirun's report."""
    host = lost_host(untagged)
    if host:
        return ("tfringrun: lost contact with host %s (network link or host down); the job was stopped" % host)
    text = " ".join(line.strip() for line in untagged)
    m = re.search(r"rank (\d+) with PID \d+ on node (\S+) exited on\s+signal (\d+)(?: \(([^)]*)\))?", text)
    if m:
        return "tfringrun: rank %s on host %s was killed by signal %s%s; the job was stopped" % (
            m.group(1), m.group(2), m.group(3), " (%s)" % m.group(4) if m.group(4) else "")
    m = re.search(r"Process name: \[\S+?,(\d+)\]\s+Exit code:\s+(\d+)", text)
    if m:
        host = re.search(r"on node (\S+)", text)
        return "tfringrun: rank %s%s exited with code %s; the job was stopped" % (
            m.group(1), " on host %s" % host.group(1).rstrip(".,") if host else "", m.group(2))
    m = re.search(r"rank (\d+) with PID \d+ on node (\S+) exiting\s+improperly", text)
    if m:
        return "tfringrun: rank %s on host %s exited without finalizing (it died mid-job); the job was stopped" % (
            m.group(1), m.group(2))
    return "tfringrun: the job failed (exit code %d)" % rc


def run_command(cmd, output_dir=None, stdout=None, stderr=None):
    """Runs mpirun; returns its exit code. SIGINT/SIGTERM stop every rank (SIGKILL after 5 s)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                            start_new_session=True)
    relay = Relay(output_dir)
    stopping = []

    def stop(signum, _frame):
        stopping.append(signum)
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # mpirun forwards it to every rank
        except ProcessLookupError:
            pass

        def escalate():
            time.sleep(5)
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        threading.Thread(target=escalate, daemon=True).start()

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
    if stopping:
        stderr.write("tfringrun: stopped by signal %d\n" % stopping[0])
        return 128 + stopping[0]
    if rc == 0 and lost_host(relay.untagged):
        rc = 1  # PRRTE exits 0 when it loses a host; the job did not finish
    if rc != 0:
        summary = failure_summary(rc, relay.untagged)
        if relay.shutdown_by is not None:
            # The first rank to fail may only be a victim: say who ended tfring first.
            summary += " (tfring had been shut down by rank %s: it exited or called shutdown() first)" % \
                relay.shutdown_by
        stderr.write(summary + "\n")
    return rc


def main(argv=None):
    args = apply_config_file(build_parser().parse_args(argv))
    if args.check_build:
        check_build()
        return 0
    if args.gloo:
        raise SystemExit("tfringrun: --gloo is not supported (tfring is built with MPI only); use --mpi")
    for flag, feature in NOT_BUILT.items():
        if getattr(args, flag, None):
            raise SystemExit("tfringrun: --%s: %s is not built in tfring yet" % (flag.replace("_", "-"), feature))
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        raise SystemExit("tfringrun: no command to run (e.g. tfringrun -np 2 python train.py)")
    if args.command[0] in ("python", "python3"):
        # A bare `python` means the interpreter tfring is installed in, even when the venv is not activated.
        args.command[0] = sys.executable
    os.environ.update(knob_env(args))
    cmd = build_command(args)
    if args.verbose:
        print("tfringrun: " + " ".join(cmd), flush=True)
    sys.exit(run_command(cmd, args.output_filename))


if __name__ == "__main__":
    main()
