"""The ranks' own exit reports in an elastic job (`/exit`). Open MPI 5.0.11's mpirun can die in its teardown
(SIGSEGV or SIGABRT) after a spawn onto a host added to the allocation, once every rank has exited: mpirun's
status then says nothing about the job. Each rank reports its status at exit; when the last world's ranks
0..n-1 all reported 0 and none reported a failure, the job succeeded whatever mpirun says. Each rank also reports
its start (`/start`): a job whose ranks started and none reported its exit did not finish, even where mpirun
under ULFM exits 0 (ranks ended inside MPI, or killed). Reports name the launcher's mpirun run when it numbers
them, so a late report of an earlier run is not counted for the next."""
import threading

from tfring.common.elastic import protocol


class ExitLedger:
    """Thread-safe record of the `/exit` reports of one mpirun run."""

    def __init__(self):
        self._lock = threading.Lock()
        self._reports = {}  # (size, rank) -> exit code
        self._started = set()  # (size, rank) of the ranks that reported their start
        self._launch = None  # the mpirun run reports are counted for (None: any)

    def clear(self, launch=None):
        """Forgets every report (a new mpirun run starts).

        Args:
            launch: the new run's number: reports naming another run (a late one of the run before) are not
                counted (None: every report counts).
        """
        with self._lock:
            self._reports.clear()
            self._started.clear()
            self._launch = launch

    def _current(self, launch):
        return launch is None or self._launch is None or launch == self._launch

    def start(self, payload):
        """Handler of `/start`: a rank started tfring.

        Args:
            payload: {"rank": int, "size": int}.

        Returns:
            dict: {"ok": True}.

        Raises:
            BadRequest: a field missing, not an int, or rank outside [0, size).
        """
        rank, size, launch = protocol.check_start(payload)
        with self._lock:
            if self._current(launch):
                self._started.add((size, rank))
        return {"ok": True}

    def started(self):
        """Whether any rank reported its start (ranks that run tfring's elastic runtime)."""
        with self._lock:
            return bool(self._started)

    def record(self, payload):
        """Handler of `/exit`: one rank's status as it exits.

        Args:
            payload: {"rank": int, "size": int, "code": int} (the rank in the job's world of that size).

        Returns:
            dict: {"ok": True}.

        Raises:
            BadRequest: a field missing, not an int, or rank outside [0, size).
        """
        rank, size, code, launch = protocol.check_exit(payload)
        with self._lock:
            if self._current(launch):
                self._reports[(size, rank)] = code
        return {"ok": True}

    def reported(self):
        """Whether any rank reported its status."""
        with self._lock:
            return bool(self._reports)

    def failed(self):
        """Whether some rank reported a non-zero status (its own failure: an exception, sys.exit(n))."""
        with self._lock:
            return any(code != 0 for code in self._reports.values())

    def _complete_locked(self):
        sizes = {s for s, _ in self._reports}
        return next((n for n in sorted(sizes, reverse=True) if all((n, r) in self._reports for r in range(n))), None)

    def complete_size(self):
        """The size of a world whose every rank reported its exit, whatever the codes (None: none yet)."""
        with self._lock:
            return self._complete_locked()

    def finished_size(self):
        """The size of the world whose every rank reported status 0, if no report was a failure.

        Returns:
            int or None: n when ranks 0..n-1 of a world of n reported 0 and no rank reported non-zero, else None.
        """
        with self._lock:
            return None if any(code != 0 for code in self._reports.values()) else self._complete_locked()
