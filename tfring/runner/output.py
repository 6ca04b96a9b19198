"""Relays mpirun's output as bytes: Open MPI's '[job,rank]<stdout>: ' tag becomes horovodrun's '[rank]<stdout>:',
repeated after every '\\r' so carriage-return progress bars (Keras verbose=1) keep their rank on each update;
optional timestamps; optional per-rank log files. Memory stays bounded whatever the ranks print: output is
streamed in 64 KiB reads, and only the tail of mpirun's own messages is kept (to name the rank that failed)."""
import codecs
import collections
import os
import re
import threading
import time

_TAG = re.compile(rb"\[\d+,(\d+)\]<(stdout|stderr|stddiag)>: ?")
_TAG_START = re.compile(rb"\[[\d,]*(\]<?[a-z]*>?:?)?\Z")  # an incomplete tag at the end of a read
_EOL = re.compile(rb"[\r\n]")
_TFRING_LOG = b"[tfring "  # tfring's backend log lines: "[tfring WARNING rank 0] ..."
_PEER_SHUTDOWN = re.compile(r"tfring was shut down by rank (\d+)")
# Each rank's first line when tfringrun watches start-up (--start-timeout); swallowed here.
STARTED = b"tfringrun-rank-started-8c1f"
_STARTED_LINE = STARTED + b"\n"
READ_SIZE = 65536
HEAD_BYTES = 4096  # of each line, kept to find the patterns above
KEEP_LINES = 200  # of mpirun's own (untagged) lines; its failure report is the last few dozen


def stamp():
    return time.asctime()  # horovodrun's format ("Tue Mar 10 12:00:00 2026[0]<stdout>:...")


class _Sink:
    """Writes bytes to a binary stream, or to a text stream (decoding UTF-8 across read boundaries)."""

    def __init__(self, out):
        self.out = out
        self.binary = getattr(out, "buffer", None)
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, data):
        if self.binary is not None:
            self.out.flush()
            self.binary.write(data)
            self.binary.flush()
        else:
            self.out.write(self.decoder.decode(data))
            self.out.flush()


class _Line:
    """Parser state of one pipe: are we at a line start, whose line is it, does the next piece need a tag."""

    def __init__(self):
        self.pending = b""  # a possible tag split across reads (< 64 bytes)
        self.at_start = True
        self.rank = self.stream = None  # None: mpirun's own line
        self.new_segment = True
        self.head = bytearray()


class Relay:
    def __init__(self, output_dir=None, timestamp_output=False, timestamp_logs=False):
        self.output_dir = output_dir
        self.timestamp_output = timestamp_output
        self.timestamp_logs = timestamp_logs
        self.files = {}
        self.lock = threading.Lock()
        self.untagged = collections.deque(maxlen=KEEP_LINES)  # mpirun's own messages (which rank failed, why)
        self.shutdown_by = None  # a rank whose exit ended tfring on the others
        self.ranks_spoke = False  # a rank wrote a line or announced its start
        self.started, self.expected, self.all_started = set(), None, threading.Event()
        if output_dir:
            os.makedirs(output_dir, exist_ok=True)

    def _file(self, rank):
        if rank not in self.files:
            self.files[rank] = open(os.path.join(self.output_dir, "rank.%s.log" % rank), "ab")
        return self.files[rank]

    def pump(self, stream, out):
        """Copies `stream` (mpirun's stdout or stderr pipe) to `out` until EOF."""
        sink, line, fd = _Sink(out), _Line(), stream.fileno()
        while True:
            chunk = os.read(fd, READ_SIZE)
            if not chunk:
                break
            self.feed(line, chunk, sink)
        if line.pending:  # the stream ended inside something that looked like a tag
            line.at_start, line.rank = False, None
            self._write(sink, [line.pending], {})
            line.head += line.pending
        self._end_line(line)

    def feed(self, line, chunk, sink):
        data, line.pending = line.pending + chunk, b""
        out, logs = [], {}
        i, n = 0, len(data)
        while i < n:
            if line.at_start:
                m = _TAG.match(data, i)
                if m is None and _TAG_START.match(data, i):
                    line.pending = data[i:]  # wait for the rest of the tag
                    break
                if m and data.startswith(_STARTED_LINE, m.end()):
                    self._started(int(m.group(1)))
                    i = m.end() + len(_STARTED_LINE)
                    continue
                if m and n - m.end() < len(_STARTED_LINE) and _STARTED_LINE.startswith(data[m.end():]):
                    line.pending = data[i:]  # maybe the start marker, cut by the read
                    break
                line.rank, line.stream = (m.group(1).decode(), m.group(2).decode()) if m else (None, None)
                self.ranks_spoke = self.ranks_spoke or m is not None
                line.at_start, line.new_segment = False, True
                i = m.end() if m else i
                continue
            eol = _EOL.search(data, i)
            end = eol.end() if eol else n
            piece = data[i:end]
            if line.rank is not None:
                if line.new_segment and piece != b"\r":  # a bare \r (Keras writes one before each update)
                    tag = self._tag(line, piece)          # needs no tag of its own
                    out.append(tag)
                    logs.setdefault(line.rank, []).append(tag)
                logs.setdefault(line.rank, []).append(piece)
            out.append(piece)
            if len(line.head) < HEAD_BYTES:
                line.head += piece[:HEAD_BYTES - len(line.head)]
            line.new_segment = eol is not None
            if piece.endswith(b"\n"):
                self._end_line(line)
                line.at_start = True
            i = end
        self._write(sink, out, logs)

    def _started(self, rank):
        with self.lock:
            self.ranks_spoke = True
            self.started.add(rank)
            if self.expected is not None and len(self.started) >= self.expected:
                self.all_started.set()

    def _tag(self, line, piece):
        tag = "[%s]<%s>:" % (line.rank, line.stream)
        if self.timestamp_output or (self.timestamp_logs and piece.startswith(_TFRING_LOG)):
            tag = stamp() + tag
        return tag.encode()

    def _end_line(self, line):
        if line.head:
            text = line.head.decode("utf-8", "replace")
            if line.rank is None:
                self.untagged.append(text)
            elif self.shutdown_by is None:
                peer = _PEER_SHUTDOWN.search(text)
                if peer:
                    with self.lock:
                        self.shutdown_by = self.shutdown_by or peer.group(1)
        line.head = bytearray()

    def _write(self, sink, out, logs):
        with self.lock:
            if self.output_dir:
                for rank, pieces in logs.items():
                    f = self._file(rank)
                    f.write(b"".join(pieces))
                    f.flush()
        if out:
            sink.write(b"".join(out))

    def close(self):
        for f in self.files.values():
            f.close()


def lost_host(untagged):
    """The host PRRTE lost contact with (link cut, host down), or None."""
    text = " ".join(line.strip() for line in untagged)
    if "lost communication with a remote daemon" not in text and "daemon failed to report back" not in text:
        return None
    # "lost communication" names it "Remote daemon: [...] on node H"; "failed to report back" (a daemon that never
    # came up, e.g. on a restart after a cut link) names it "Remote host: H".
    m = re.search(r"Remote daemon:\s+\S+ on node (\S+)", text) or re.search(r"Remote host:\s+(\S+)", text) or \
        re.search(r"on node (\S+)", text)
    return m.group(1) if m else "unknown"


def failure_summary(rc, untagged):
    """One line naming the failed rank, its host and its exit code or signal, from mpirun's report."""
    host = lost_host(untagged)
    if host:
        return "lost contact with host %s (network link or host down); the job was stopped" % host
    text = " ".join(line.strip() for line in untagged)
    m = re.search(r"rank (\d+) with PID \d+ on node (\S+) exited on\s+signal (\d+)(?: \(([^)]*)\))?", text)
    if m:
        return "rank %s on host %s was killed by signal %s%s; the job was stopped" % (
            m.group(1), m.group(2), m.group(3), " (%s)" % m.group(4) if m.group(4) else "")
    m = re.search(r"Process name: \[\S+?,(\d+)\]\s+Exit code:\s+(\d+)", text)
    if m:
        host = re.search(r"on node (\S+)", text)
        return "rank %s%s exited with code %s; the job was stopped" % (
            m.group(1), " on host %s" % host.group(1).rstrip(".,") if host else "", m.group(2))
    m = re.search(r"rank (\d+) with PID \d+ on node (\S+) exiting\s+improperly", text)
    if m:
        return "rank %s on host %s exited without finalizing (it died mid-job); the job was stopped" % (
            m.group(1), m.group(2))
    return "the job failed (exit code %d)" % rc
