"""The host discovery script of an elastic job (horovodrun's --host-discovery-script): run it, parse its
`host:slots` lines, poll it into the discovered hosts (discovered.DiscoveredHosts)."""
import os
import re
import signal
import subprocess
import threading

from tfring.runner.flags import DEFAULT_SLOTS

DISCOVERY_TIMEOUT = 10  # seconds one run of the discovery script may take
POLL_INTERVAL = 1.0  # seconds between discovery runs
_LINE = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*)(?::([0-9]+))?\Z")


class DiscoveryError(RuntimeError):
    """The discovery script could not be run, failed, timed out or printed a line that is not `host[:slots]`."""


def parse_discovery(text, default_slots=DEFAULT_SLOTS):
    """Parses the discovery script's output.

    Args:
        text: its stdout, one `host:slots` or `host` per line (blank lines are skipped; a host listed twice with
            the same slots counts once).
        default_slots: slots of a host listed without `:slots` (--slots-per-host).

    Returns:
        list: [(host, slots), ...] in the order listed.

    Raises:
        ValueError: naming the first bad line.
    """
    hosts = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = _LINE.match(line)
        if not m:
            raise ValueError("line %d %r: expected 'host:slots' or 'host'" % (lineno, raw[:200]))
        name, slots = m.group(1), int(m.group(2)) if m.group(2) is not None else default_slots
        if hosts.get(name, slots) != slots:
            raise ValueError("line %d %r: host %s listed again with other slots (%d)" % (
                lineno, raw[:200], name, hosts[name]))
        hosts[name] = slots
    return list(hosts.items())


def run_discovery(script, default_slots=DEFAULT_SLOTS, timeout=DISCOVERY_TIMEOUT):
    """Runs the discovery script once (no shell; its whole process group is killed past the timeout).

    Args:
        script: path of the executable.
        default_slots: slots of a host listed without `:slots`.
        timeout: seconds it may take.

    Returns:
        list: [(host, slots), ...] as `parse_discovery`.

    Raises:
        DiscoveryError: it could not start, timed out, exited non-zero or printed a bad line.
    """
    try:
        proc = subprocess.Popen([script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as e:
        raise DiscoveryError("cannot run it: %s" % (e.strerror or e)) from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.communicate(timeout=2)
        except subprocess.TimeoutExpired:  # a child left its own session holding the pipes
            proc.kill()
        raise DiscoveryError("did not finish within %d s" % timeout) from None
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] if err else []
        raise DiscoveryError("exited with code %d%s" % (proc.returncode, (": " + tail[0][:300]) if tail else ""))
    try:
        return parse_discovery(out.decode(errors="replace"), default_slots)
    except ValueError as e:
        raise DiscoveryError(str(e)) from None


class Poller:
    """Runs discover() every `interval` s on a daemon thread into `hosts` (DiscoveredHosts); a failed run is logged
    (once per distinct error) and ignored: the last good result stays."""

    def __init__(self, discover, hosts, say, label, interval=POLL_INTERVAL):
        self.discover, self.hosts, self.say, self.label, self.interval = discover, hosts, say, label, interval
        self._stop, self._thread, self._last_error = threading.Event(), None, None

    def poll_once(self, then="this poll is ignored"):
        try:
            hosts = self.discover()
        except DiscoveryError as e:
            if str(e) != self._last_error:
                self.say("%s: %s; %s" % (self.label, e, then))
            self._last_error = str(e)
            self.hosts.refresh()
            return False
        self._last_error = None
        self.hosts.set_discovered(hosts)
        return True

    def _loop(self):
        while not self._stop.wait(self.interval):
            self.poll_once()

    def start(self):
        self._thread = threading.Thread(target=self._loop, name="tfring-elastic-discovery", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)  # a daemon thread: a slow discovery run does not hold tfringrun's exit
