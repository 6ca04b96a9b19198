"""Committed state on disk: what a job started again resumes from.

- `tfringrun --commit-dir DIR` (TFRING_COMMIT_DIR; the engines pass it to their ranks like any knob): every
  `state.commit()` of any job using an elastic State, elastic or not, is also written to DIR in the background (the
  step does not wait for the disk), and a job started again with the same DIR resumes from the newest complete
  commit there: after the launcher, a machine or the whole job was lost.
- Without it, the elastic launcher's private directory ($TFRING_ELASTIC_STATE_DIR, mode 0700, removed at the end)
  serves the one failure ULFM cannot survive, a lost host (PRRTE ends the job, docs/elastic.md): only jobs that span
  hosts or may come to (a --host-discovery-script) write there, and only that launcher's restart reads it.

Each host's first rank writes one file, `commit.<host>.pkl` (a relaunch reads its own host's, or every host's when
DIR is shared, and takes the newest). The writer pickles the snapshot (a commit's own copies, which later steps
never change) to a temporary file, fsync'd, then renamed over the old one, so a reader never sees half a commit
and a crash mid-write leaves the previous one. The files are pickles: a DIR only the job's user can write."""
import atexit
import glob
import os
import sys
import threading
import time

from tfring.common import knobs, launch_env, topology
from tfring.common.elastic import membership
from tfring.common.elastic.membership import host_name

COMMIT_DIR = "TFRING_COMMIT_DIR"
FLUSH_SECONDS = 120  # at exit, the longest wait for the last commit to reach the disk
_synced = False  # this process's first sync happened
_writer = None
_lock = threading.Lock()


def durable_directory():
    """The user's commit directory (--commit-dir / TFRING_COMMIT_DIR), or None."""
    return knobs.value(COMMIT_DIR)[0] or None


def directory():
    """Where commits go: the user's directory, else the elastic launcher's private one, else None."""
    return durable_directory() or os.environ.get(launch_env.ELASTIC_STATE_DIR) or None


def save(snapshot, commit):
    """Hands commit number `commit` (`snapshot`, a picklable dict) to this process's writer, if this rank is its
    host's first and commits go to disk: always with a commit directory, else when the job spans hosts or has a
    discovery script. With a commit directory it returns at once (pickling and writing happen in the background);
    into the launcher's private one, once the commit is written."""
    durable = durable_directory()
    path = durable or os.environ.get(launch_env.ELASTIC_STATE_DIR)
    if not path or topology.local_rank() != 0:
        return
    if not durable and not (topology.cross_size() >= 2 or os.environ.get(launch_env.ELASTIC_DISCOVERY) == "1"):
        return
    # Pickled by the writer: a snapshot is never changed after its commit (each save() makes new copies).
    record = {"commit": commit, "snapshot": snapshot, "size": topology.size(), "time": time.time()}
    writer().put(os.path.join(path, "commit.%s.pkl" % _host_tag()), record)
    if not durable:  # the lost-host path: PRRTE ends the survivors with SIGTERM (no exit flush)
        writer().flush(FLUSH_SECONDS)


def _host_tag():
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in host_name())


def write_atomically(path, data):
    """Writes `data` (bytes, or an object to pickle) to `path` so that a reader sees the old file or the whole new
    one, even after a crash."""
    if not isinstance(data, bytes):
        import cloudpickle
        data = cloudpickle.dumps(data)
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)  # on another host than the launcher's it may not exist yet
    tmp = "%s.%d.tmp" % (path, os.getpid())
    for stale in glob.glob(glob.escape(path) + ".*.tmp"):  # left by a process killed mid-write (one writer a host)
        if stale != tmp:
            try:
                os.remove(stale)
            except OSError:
                pass
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself
    finally:
        os.close(fd)


class Writer:
    """One background thread writing the newest commit handed to it; a commit still waiting when a newer one comes
    is dropped (only the newest is ever read). At exit the last one is written (at most FLUSH_SECONDS).

    Args:
        write: callable(path, data) (default write_atomically).
    """

    def __init__(self, write=write_atomically):
        self._write, self._cond = write, threading.Condition()
        self._pending, self._busy, self.written, self._warned = None, False, 0, set()
        threading.Thread(target=self._run, name="tfring-commit-writer", daemon=True).start()

    def put(self, path, data):
        """Queues `data` for `path`, replacing what still waits."""
        with self._cond:
            self._pending = (path, data)
            self._cond.notify_all()

    def flush(self, timeout):
        """Waits until everything queued is written.

        Args:
            timeout: the most seconds to wait.

        Returns:
            bool: whether nothing is left to write.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self._pending is not None or self._busy) and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            return self._pending is None and not self._busy

    def _run(self):
        while True:
            with self._cond:
                while self._pending is None:
                    self._cond.wait()
                (path, data), self._pending, self._busy = self._pending, None, True
            try:
                self._write(path, data)
                self.written += 1
            except Exception as e:  # noqa: BLE001 - the job goes on; said once per kind of failure, not per commit
                if (type(e), getattr(e, "errno", None), path) not in self._warned:
                    self._warned.add((type(e), getattr(e, "errno", None), path))
                    sys.stderr.write("tfring.elastic: cannot write the commit to %s: %s: %s\n" % (
                        path, type(e).__name__, e))
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


def writer():
    """This process's Writer (started on first use; flushed at exit)."""
    global _writer
    with _lock:
        if _writer is None:
            _writer = Writer()
            atexit.register(_writer.flush, FLUSH_SECONDS)
        return _writer


def newest(folder):
    """The newest complete commit in `folder`: (commit, snapshot), or None. An unreadable file is skipped (said)."""
    import cloudpickle

    best = None
    for name in glob.glob(os.path.join(folder, "commit.*.pkl")):
        try:
            with open(name, "rb") as f:
                data = cloudpickle.load(f)
            number = int(data["commit"])
        except Exception as e:  # noqa: BLE001 - any damaged file: the others may still serve
            sys.stderr.write("tfring.elastic: skipping the unreadable commit file %s: %s\n" % (name, e))
            continue
        if best is None or number > best["commit"]:
            best = data
    return (int(best["commit"]), best["snapshot"]) if best else None


def first_sync():
    """True at the first `sync()` of a process that started with the job (every rank alike: the job's first sync,
    or a restarted job's); False afterwards and in a process a growth added (whose first sync is the others' n-th)."""
    global _synced
    if _synced:
        return False
    _synced = True
    return not membership.spawned()


def resumable():
    """Whether a job starting now reads commits from disk (the same on every rank): with a commit directory (a job
    started again with it), or when the elastic launcher restarted the job after a lost host."""
    return directory() is not None and bool(durable_directory() or os.environ.get(launch_env.ELASTIC_RESTART) == "1")


def load():
    """Rank 0 at a resumable job's first sync: the newest commit to resume from, (commit, snapshot), or None."""
    folder = directory()
    try:
        mode = os.stat(folder)
        if mode.st_mode & 0o022 or mode.st_uid != os.getuid():  # its pickles run code when loaded
            sys.stderr.write("tfring.elastic: warning: %s is writable by others than this user (mode %o, owner %d): "
                             "anyone who can write there can run code in this job\n" % (
                                 folder, mode.st_mode & 0o777, mode.st_uid))
    except OSError:
        pass
    found = newest(folder)
    if durable_directory():
        sys.stderr.write("tfring.elastic: resuming from commit %d in %s\n" % (found[0], folder) if found else
                         "tfring.elastic: no commit in %s (on this host): starting from the beginning\n" % folder)
    return found
