"""Supervises one mpirun: relays its output tagged by rank (output.Relay), forwards Ctrl-C/SIGTERM to every rank
(SIGKILL after 5 s), stops a job whose ranks do not start in time, takes the ranks an mpirun that died left behind,
and reports which rank failed."""
import os
import signal
import subprocess
import sys
import threading
import time

from tfring.runner.output import Relay, failure_summary, lost_host, stamp
from tfring.runner.processes import descendants, kill_session
from tfring.runner.stale_sessions import remove_stale


# Open MPI 5's launcher occasionally fails this way at start-up (seen about once in a few hundred launches on a
# loaded 2-core machine, not reproducible on demand); no rank has run, so starting again is safe.
TRANSIENT_START_FAILURE = "The PMIx server's listener thread failed to start"
FINISHED_GRACE = 5  # seconds mpirun has to end after every rank reported its exit (elastic jobs)


def failed_to_start(rc, relay):
    """Whether mpirun failed with TRANSIENT_START_FAILURE before any rank wrote or announced anything."""
    text = " ".join(line.strip() for line in relay.untagged)
    return rc > 0 and not relay.ranks_spoke and TRANSIENT_START_FAILURE in text


class Mpirun:
    """One mpirun: started, its output relayed, stopped on kill() (SIGTERM to every rank, SIGKILL after 5 s) or
    when a rank does not announce its start within start_timeout seconds."""

    def __init__(self, cmd, env, relay, start_timeout, num_ranks, preexec_fn=None):
        self.relay, self.late = relay, []
        self.ended = False  # by wait(), after every rank reported its exit
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, env=env,
                                     start_new_session=True, preexec_fn=preexec_fn)
        if start_timeout:
            relay.expected = num_ranks
            threading.Thread(target=self._watch_start, args=(start_timeout, num_ranks), daemon=True).start()

    def kill(self):
        proc = self.proc
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

    def _watch_start(self, start_timeout, num_ranks):
        if not self.relay.all_started.wait(start_timeout) and self.proc.poll() is None:
            self.late.extend(sorted(set(range(num_ranks)) - self.relay.started))
            self.kill()

    def wait(self, stdout, stderr, done=None):
        """Relays the output until mpirun exits; returns its exit code. done: callable() -> whether every rank of
        the job reported its exit (elastic): mpirun is then ended if it has not exited FINISHED_GRACE s later (it
        waits for a daemon behind a cut link that no longer hears it, or for a rank stuck in MPI_Finalize)."""
        threads = [threading.Thread(target=self.relay.pump, args=(self.proc.stdout, stdout), daemon=True),
                   threading.Thread(target=self.relay.pump, args=(self.proc.stderr, stderr), daemon=True)]
        for t in threads:
            t.start()
        finished_at = None
        while True:
            try:
                rc = self.proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if done is None or not done():
                    continue
                finished_at = finished_at or time.monotonic()
                if time.monotonic() - finished_at > FINISHED_GRACE:
                    stderr.write("tfringrun: every rank reported its exit %d s ago, but mpirun has not ended: ending "
                                 "it\n" % FINISHED_GRACE)
                    self.kill()
                    done, finished_at, self.ended = None, None, True
        if rc < 0:  # mpirun itself died of a signal (not ours: that gives 128 + n): take the ranks it left behind
            kill_session(self.proc.pid)
            rc = 128 - rc if self.ended else rc  # ended here, not a crash: no restart for it
        for t in threads:
            t.join(timeout=5)
        self.relay.close()
        return rc


def run_command(cmd, output_dir=None, stdout=None, stderr=None, env=None, timestamp_output=False,
                timestamp_logs=False, start_timeout=0, num_ranks=0, report=None, finished=None, done=None):
    """Runs mpirun; returns its exit code. SIGINT/SIGTERM stop every rank (SIGKILL after 5 s), as does a rank
    that has not started within start_timeout seconds (the command must then be wrapped by plan()). Runs it once
    more, saying so, when Open MPI failed at start-up (TRANSIENT_START_FAILURE) before any rank wrote a line.

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
        report: a dict that receives "stopped" (by SIGINT/SIGTERM) and "lost_host" (the host PRRTE lost, or None), or
            None.
        finished: callable(rc) -> str or None: for a failed mpirun, a line saying the job finished all the same
            (every rank reported success; elastic mode), then the exit code is 0.
        done: callable() -> whether every rank reported its exit (Mpirun.wait), or None.

    Returns:
        int: mpirun's exit code (128 + signal when stopped by one).
    """
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    current, stopping = [None], []

    def stop(signum, _frame):
        stopping.append(signum)
        if current[0] is not None:
            current[0].kill()

    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for attempt in range(2):
            if attempt and stopping:
                break
            remove_stale(env)  # a killed launch's session directory fails the next mpirun on its pid
            relay = Relay(output_dir, timestamp_output, timestamp_logs)
            current[0] = Mpirun(cmd, env, relay, start_timeout, num_ranks)
            rc = current[0].wait(stdout, stderr, done)
            if stopping or attempt or not failed_to_start(rc, relay):
                break
            stderr.write("%stfringrun: Open MPI failed before starting any rank (%s); starting the job again\n" % (
                stamp() + " " if timestamp_logs else "", TRANSIENT_START_FAILURE))
    finally:
        if main_thread:
            for s, h in old.items():
                signal.signal(s, h)
    late = current[0].late

    def say(msg):
        stderr.write("%stfringrun: %s\n" % (stamp() + " " if timestamp_logs else "", msg))
    if report is not None:
        report["stopped"] = bool(stopping)  # by SIGINT/SIGTERM: the elastic driver must not start it again
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
