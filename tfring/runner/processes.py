"""Process-tree helpers of the launcher (Linux /proc; harmless elsewhere): who is below a process, whether a
process is still the one we started, ending a child with everything it left, and dying with one's parent.
Light on purpose: the slot agent and the ranks import it too."""
import ctypes
import os
import signal
import subprocess

PR_SET_PDEATHSIG = 1

try:  # resolved at import, before any fork: a preexec_fn child only calls it
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def die_with_parent(signum=signal.SIGTERM):
    """Linux: the kernel sends `signum` to this process when its parent dies (PR_SET_PDEATHSIG); for a child that a
    thread started, when that thread ends, so spawn only from a thread that lives as long as the child should.
    Safe as a Popen preexec_fn.

    Args:
        signum: the signal to receive.

    Returns:
        bool: whether the parent was already gone before the call (this process was reparented to init), so the
        signal will never come; False as well where it cannot be set.
    """
    if _PRCTL is None:
        return False
    _PRCTL(PR_SET_PDEATHSIG, signum)
    return os.getppid() == 1


def _stat(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces and ')'
    except (OSError, IndexError):
        return None


def parent(pid):
    """A process's parent pid, or None when it does not exist (or no /proc)."""
    fields = _stat(pid)
    try:
        return int(fields[1]) if fields else None
    except (ValueError, IndexError):
        return None


def start_time(pid):
    """A process's start time (field 22 of /proc/PID/stat): tells a process from a later one that reused its pid.

    Args:
        pid: the process id.

    Returns:
        str: the start time in clock ticks since boot, or None when the process does not exist (or no /proc).
    """
    fields = _stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


def alive(pid, started=None):
    """Whether a process still runs (and is the one that started at `started`, when given). A zombie is dead: a
    killed slot stays one until its parent (e.g. a scheduler's worker) reaps it.

    Args:
        pid: the process id.
        started: what `start_time` returned for it, or None.

    Returns:
        bool
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat(pid)
    if fields is None:  # gone since kill(0), or no /proc at all (then kill(0) is all there is to tell)
        return not os.path.isdir("/proc/self")
    return fields[0] not in ("Z", "X") and (started is None or fields[19] == started)


def descendants(pid):
    """Every process below pid (Linux /proc; empty elsewhere).

    Args:
        pid: a process id.

    Returns:
        list: process ids.
    """
    children = {}
    for entry in [e for e in os.listdir("/proc") if e.isdigit()] if os.path.isdir("/proc") else []:
        ppid = parent(int(entry))
        if ppid is not None:
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_session(sid):
    """SIGKILLs every process of session `sid` (mpirun's: it starts one), whatever process groups they made, and
    every process below one of them, whatever sessions those made (tfringrun starts mpirun in a session of its own:
    killing a hung tfringrun's session must take its mpirun and ranks too). The ranks of an mpirun that died would
    otherwise run on, orphaned, holding the output pipes (Linux /proc).

    Args:
        sid: the session id (mpirun's pid).
    """
    pids = [int(e) for e in os.listdir("/proc") if e.isdigit()] if os.path.isdir("/proc") else []
    doomed = set()
    for pid in pids:
        try:
            if os.getsid(pid) == sid:
                doomed.add(pid)
        except (ProcessLookupError, PermissionError):
            pass
    parents = {pid: parent(pid) for pid in pids}
    below = {pid for pid, ppid in parents.items() if ppid in doomed} - doomed
    while below:
        doomed |= below
        below = {pid for pid, ppid in parents.items() if ppid in below} - doomed
    doomed -= {1, os.getpid()}
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def terminate(proc, grace=3.0):
    """SIGTERM to a process's session, SIGKILL to it and whatever it left after `grace` seconds.

    Args:
        proc: a subprocess.Popen started with start_new_session=True.
        grace: seconds between the two signals.
    """
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    for pid in descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    kill_session(proc.pid)
    try:
        proc.kill()
        proc.wait(5)
    except (OSError, subprocess.TimeoutExpired):
        pass
