"""tfringrun in elastic mode (--min-np, --max-np or --host-discovery-script): polls the discovery script, keeps the
available hosts (discovered minus blacklisted) and where the job's ranks are, starts `mpirun --with-ft ulfm` on
enough of them, and answers the ranks over an authenticated HTTP channel (tfring.common.signed_channel): `/hosts` (the
available hosts and the free slots the job may grow into), `/reset` (the job's placement after a failure or a
growth: blacklisting is decided by discovered.DiscoveredHosts), `/log` (a rank's line on tfringrun's stderr),
`/start` and `/exit` (each rank's start and its status at exit, exits.py) and `/end` (a silent rank alone on its
host: ender.py): the one elastic book (book.ElasticBook) the Spark/Ray elastic jobs serve too, on one listener per
interface the hosts reach (listeners.py). The ranks shrink and grow the job themselves (ULFM shrink,
MPI_Comm_spawn); this driver only keeps the books."""
import functools
import os
import shlex
import shutil
import sys
import tempfile
import time

from tfring.common import launch_env
from tfring.common.signed_channel import new_secret
from tfring.runner.elastic.book import ElasticBook
from tfring.runner.elastic.discovered import DiscoveredHosts, choose_hosts
from tfring.runner.elastic.discovery import Poller, run_discovery
from tfring.runner.elastic.ender import end_rank
from tfring.runner.elastic.hostnames import bind_address
from tfring.runner.elastic.listeners import Listeners
from tfring.runner.flags import DEFAULT_SLOTS, UsageError
from tfring.runner.mpirun import elastic_timeout, host_list, plan_elastic, ssh_args
from tfring.runner.output import stamp
from tfring.runner.supervise import run_command


def _wait_for_slots(hosts, need, timeout, say):
    deadline = time.monotonic() + timeout
    if sum(s for _, s in hosts.refresh()) < need:
        say("waiting up to %d s (--elastic-timeout) for --min-np %d slots" % (timeout, need))
    while sum(s for _, s in hosts.refresh()) < need:
        if time.monotonic() >= deadline:
            say("only %d slots available after %d s (--min-np %d)" % (sum(s for _, s in hosts.refresh()), timeout,
                                                                      need))
            return False
        time.sleep(0.2)
    return True


def _hosts_with_drivers(book, listeners, payload):
    # /hosts, plus for each host offered for growth the driver's address on the route to it (rank 0 passes it to
    # the processes it spawns there: a job started on 127.0.0.1 alone is not reachable from a new remote host).
    reply = book.hosts(payload)
    reply["drivers"] = listeners.drivers_for(reply["add"])
    return reply


def _finished(exits, rc):
    size = exits.finished_size()
    if size is None:
        return None
    return ("every rank of the final %d reported success, but mpirun ended with exit code %d after them (Open MPI "
            "5.0.11 can crash in its teardown after a spawn onto an added host, or wait for a daemon behind a cut "
            "link; see docs/elastic.md): the job succeeded" % (size, rc))


CRASH_RESTARTS = 3  # restarts after every rank died without a failure of its own (a job that kills itself: not more)


def _launch_until_done(args, book, listeners, secret, state_dir, environ, stderr, say, timeout):
    """Runs mpirun; when Open MPI lost a host (ULFM survives lost processes, not lost hosts: PRRTE ends the
    job), blacklists it and starts the job again on the remaining hosts, resuming from the last commit on disk."""
    extra = {launch_env.ELASTIC_STATE_DIR: state_dir}
    crash_restarts, launches = 0, 0
    while True:
        available = book.source.refresh()
        hosts, np_ = choose_hosts(available, args.np, args.max_num_proc)
        try:
            address = listeners.address_for([h for h, _ in hosts])
        except (RuntimeError, OSError) as e:
            say("cannot serve the ranks on %s: %s" % (",".join(h for h, _ in hosts), e))
            return 1
        launches += 1
        extra[launch_env.ELASTIC_LAUNCH] = str(launches)  # the ranks' start and exit reports name their run
        cmd, env = plan_elastic(args, hosts, np_, address, secret, environ, extra_env=extra)
        book.source.set_placement(hosts, np_)
        if args.verbose:
            print("tfringrun: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        report, at_launch = {}, book.host_requests
        book.exits.clear(launches)
        book.declared.clear()
        rc = run_command(cmd, args.output_filename, stderr=stderr, env=env,
                         timestamp_output=bool(args.prefix_output_with_timestamp),
                         timestamp_logs=bool(args.log_with_timestamp), start_timeout=args.start_deadline,
                         num_ranks=args.num_ranks, report=report, finished=functools.partial(_finished, book.exits),
                         done=lambda: book.exits.complete_size() is not None)
        lost = report.get("lost_host")
        # Every rank gone without a failure of its own (killed together, or crashed inside Open MPI: a SIGSEGV in
        # ULFM's shrink) after a commit of this launch: mpirun exits non-zero, or 0 when none reported at all (under
        # ULFM a killed process counts as a success; a rank of a committing job reports its status at exit).
        progress = book.host_requests > at_launch and not report.get("stopped") and not lost
        vanished = rc == 0 and progress and not book.exits.reported()
        crashed = (rc > 0 or vanished) and progress and not book.exits.failed()
        if crashed and crash_restarts >= CRASH_RESTARTS:
            say("the ranks died again without a failure of their own; restarted %d times already: ending the job"
                % crash_restarts)
            return rc or 1
        if rc == 0 and not (lost or crashed or report.get("stopped")) and book.exits.started() and \
                not book.exits.reported():
            # ULFM's mpirun exits 0 when every rank ends inside MPI (Open MPI 5.0.11 exits a rank waiting in the
            # shrink when the awaited peer dies) or is killed: ranks that started and none that reported its exit
            # (a rank's exit report runs at Python's exit, os._exit skips it) is a job that did not finish.
            say("mpirun exited 0, but no rank reported its exit (the ranks ended inside MPI or were killed): the job "
                "did not finish")
            return 1
        if not (lost or rc < 0 or crashed):
            return rc
        # A lost host, or mpirun itself killed by a signal (Open MPI 5.0.11's prterun can crash while spawning
        # onto an added host, docs/elastic.md): either way the ranks are gone and the job restarts.
        crash_restarts += bool(crashed)
        what = "lost host %s" % lost if lost else "mpirun died of signal %d" % -rc if rc < 0 else \
            "every rank ended without reporting its status (mpirun exited with code %d)" % rc
        resets = book.lost(lost)
        if args.reset_limit is not None and resets > args.reset_limit:
            say("%s; the job was reset %d times (--reset-limit %d): not restarting it" % (
                what, resets, args.reset_limit))
            return rc if rc > 0 else 1
        say("%s: starting the job again on the %s hosts from the last commit" % (
            what, "remaining" if lost else "available"))
        if not _wait_for_slots(book.source, args.min_num_proc, timeout, say):
            return rc if rc > 0 else 1
        extra[launch_env.ELASTIC_RESTART] = "1"


def _fixed_hosts(args):  # without a discovery script: -H, --hostfile, else localhost with -np slots
    hosts = host_list(args) or [("localhost", args.np)]
    total = sum(s for _, s in hosts)
    if total < args.min_num_proc:
        raise UsageError("--min-np: %d is more than the %d slots of %s" % (
            args.min_num_proc, total, "-H" if args.hosts else "--hostfile"))
    return hosts


def run_elastic(args, environ=None, stderr=None):
    """tfringrun in elastic mode: discovery, the driver's server, mpirun; returns when mpirun exits.

    Args:
        args: parsed, checked arguments (flags.is_elastic(args) is true).
        environ: the launcher's environment (default os.environ).
        stderr: where tfringrun's own lines go (default sys.stderr).

    Returns:
        int: mpirun's exit code (0: the job succeeded); 1 when discovery fails at once or too few slots come
        within --elastic-timeout; 130 on Ctrl-C while waiting.

    Raises:
        UsageError: a bad host list or environment value.
    """
    stderr = stderr or sys.stderr
    environ = os.environ if environ is None else environ
    timeout = elastic_timeout(args, environ)

    def say(message):
        stderr.write("%stfringrun: elastic: %s\n" % (stamp() + " " if args.log_with_timestamp else "", message))
        stderr.flush()

    if args.host_discovery_script:
        label = "--host-discovery-script %s" % args.host_discovery_script
        discover = functools.partial(run_discovery, args.host_discovery_script, args.slots or DEFAULT_SLOTS)
    else:
        label, discover = "hosts", _fixed_hosts(args).copy
    hosts = DiscoveredHosts(args.cooldown_range, say)
    book = ElasticBook(hosts, args.max_num_proc, args.reset_limit, say)
    poller = Poller(discover, hosts, say, label)
    if not poller.poll_once(then="the first run must succeed (as horovodrun)"):
        return 1
    poller.start()
    try:
        if not _wait_for_slots(hosts, args.min_num_proc, timeout, say):
            return 1
        secret = new_secret()
        try:
            handlers = book.handlers()
            # Every rank may call at once (a reset): the servers' connection limits fit the largest job.
            clients = max(args.max_num_proc or 0, sum(n for _, n in hosts.refresh()))
            listeners = Listeners(bind_address, secret, handlers, log=stderr, clients=clients)
            handlers["/hosts"] = functools.partial(_hosts_with_drivers, book, listeners)
            listeners.address_for([h for h, _ in hosts.refresh()])  # fails early, as before the first launch
        except (RuntimeError, OSError) as e:
            say("cannot start the driver: %s" % e)
            return 1
        state_dir = tempfile.mkdtemp(prefix="tfring-elastic-")  # mode 0700: committed state for a restart
        book.ender = functools.partial(end_rank, state_dir=state_dir, ssh=ssh_args(args),
                                       known_hosts=lambda: [h for h, _ in hosts.refresh()])
        try:
            return _launch_until_done(args, book, listeners, secret, state_dir, environ, stderr, say, timeout)
        finally:
            listeners.stop()
            shutil.rmtree(state_dir, ignore_errors=True)
    except KeyboardInterrupt:
        say("stopped while waiting for slots")
        return 130
    finally:
        poller.stop()
