"""tfringrun -np 4 -H localhost:4 python train.py: builds and runs an mpirun command so that a user never
sees an Open MPI setup error (root, more ranks than cores, core binding), with horovodrun's flags mapped
onto tfring's knob table (TFRING_* environment variables)."""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading

from tfring.runner.hosts import parse_hostfile, parse_hosts

# horovodrun flag -> (TFRING_ knob, conversion). Each knob is a row of the runtime's table.
KNOB_FLAGS = {
    "fusion_threshold_mb": ("TFRING_FUSION_THRESHOLD", lambda v: str(int(float(v) * 1024 * 1024))),
    "cycle_time_ms": ("TFRING_CYCLE_TIME", str),
    "cache_capacity": ("TFRING_CACHE_CAPACITY", str),
    "log_level": ("TFRING_LOG_LEVEL", lambda v: v.lower()),
}
NOT_BUILT = {
    "hierarchical_allreduce": "hierarchical allreduce", "timeline_filename": "the timeline",
    "autotune": "autotune", "stall_check_warning_time_seconds": "the stall inspector",
    "stall_check_shutdown_time_seconds": "the stall inspector",
}


def build_parser():
    p = argparse.ArgumentParser(prog="tfringrun", description="Launch a tfring (Horovod-style) job.")
    p.add_argument("-np", "--num-proc", dest="np", type=int, help="number of processes")
    p.add_argument("-H", "--hosts", help="host1:slots,host2:slots (default localhost:<np>)")
    p.add_argument("--hostfile", help="file of 'host slots=N' lines")
    p.add_argument("--fusion-threshold-mb", type=float)
    p.add_argument("--cycle-time-ms", type=float)
    p.add_argument("--cache-capacity", type=int)
    p.add_argument("--disable-cache", action="store_true")
    p.add_argument("--log-level", choices=["TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "trace", "debug", "info",
                                           "warning", "error"])
    p.add_argument("--hierarchical-allreduce", action="store_true")
    p.add_argument("--timeline-filename")
    p.add_argument("--autotune", action="store_true")
    p.add_argument("--stall-check-warning-time-seconds", type=float)
    p.add_argument("--stall-check-shutdown-time-seconds", type=float)
    p.add_argument("--mpi-args", default="", help="extra arguments passed to mpirun verbatim")
    p.add_argument("--mpi", action="store_true", help="use MPI (the only controller tfring has)")
    p.add_argument("--gloo", action="store_true")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--check-build", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def check_build():
    import tfring
    from tfring import _lib
    info = _lib.build_info()
    from mpi4py import MPI
    lines = ["tfring %s" % tfring.__version__,
             "  TensorFlow built for: %s" % info.get("tensorflow", "unknown"),
             "  MPI: %s; %s" % (info.get("mpi", "unknown"), MPI.Get_library_version().splitlines()[0].strip()),
             "  NCCL/CUDA: %s" % ("yes" if tfring.nccl_built() else "no"),
             "  Gloo: no",
             "  Ops: HorovodAllreduce HorovodGroupedAllreduce HorovodAllgather HorovodGroupedAllgather "
             "HorovodBroadcast HorovodAlltoall HorovodReducescatter HorovodGroupedReducescatter HorovodJoin "
             "HorovodBarrier (CPU kernels)"]
    print("\n".join(lines))


def mpirun_path():
    here = os.path.join(os.path.dirname(sys.executable), "mpirun")
    return here if os.path.exists(here) else shutil.which("mpirun") or "mpirun"


def build_command(args):
    if args.hosts and args.hostfile:
        raise SystemExit("tfringrun: pass -H/--hosts or --hostfile, not both")
    hosts = parse_hostfile(args.hostfile) if args.hostfile else parse_hosts(args.hosts) if args.hosts else None
    np_ = args.np or (sum(s for _, s in hosts) if hosts else None)
    if not np_ or np_ < 1:
        raise SystemExit("tfringrun: -np must be a positive number of processes, got %r" % (args.np,))
    slots = sum(s for _, s in hosts) if hosts else np_
    local_only = not hosts or all(h in ("localhost", "127.0.0.1") for h, _ in hosts)
    cmd = [mpirun_path(), "-np", str(np_), "--output", "tag", "--bind-to", "none"]
    cmd += ["--host", ",".join("%s:%d" % h for h in hosts) if hosts else "localhost:%d" % np_]
    if np_ > slots or (local_only and np_ > (os.cpu_count() or 1)):
        cmd += ["--oversubscribe"]
    if os.geteuid() == 0:
        cmd += ["--allow-run-as-root"]
    # Environment travels with -x to remote hosts.
    for key in sorted(k for k in os.environ if k.startswith(("TFRING_", "HOROVOD_"))):
        cmd += ["-x", key]
    cmd += args.mpi_args.split()
    return cmd + args.command


def knob_env(args):
    env = {}
    for flag, (knob, conv) in KNOB_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            env[knob] = conv(value)
    if args.disable_cache:
        env["TFRING_CACHE_CAPACITY"] = "0"
    return env


_TAG = re.compile(r"^\[\d+,(\d+)\]<(stdout|stderr)>: ?")


def relay(stream, out):
    """Rewrites Open MPI's '[job,rank]<stdout>: ' tag to horovodrun's '[rank]<stdout>:' line by line."""
    for line in iter(stream.readline, ""):
        out.write(_TAG.sub(lambda m: "[%s]<%s>:" % (m.group(1), m.group(2)), line))
        out.flush()


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.check_build:
        check_build()
        return 0
    if args.gloo:
        raise SystemExit("tfringrun: --gloo is not supported (tfring is built with MPI only); use --mpi")
    for flag, feature in NOT_BUILT.items():
        if getattr(args, flag):
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
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                            start_new_session=True)

    def forward(signum, _frame):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    threads = [threading.Thread(target=relay, args=(proc.stdout, sys.stdout), daemon=True),
               threading.Thread(target=relay, args=(proc.stderr, sys.stderr), daemon=True)]
    for t in threads:
        t.start()
    rc = proc.wait()
    for t in threads:
        t.join(timeout=5)
    sys.exit(rc)


if __name__ == "__main__":
    main()
