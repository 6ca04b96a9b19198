"""The elastic ranks' channel to their launcher, written once: its paths, what each request holds, and how it is
checked, for both ends (the ranks: tfring.common.elastic; the launchers: the one book, tfring.runner.elastic.book,
over tfringrun's discovered hosts or a Spark/Ray job's registered slots). Every request is authenticated by the signed
channel first; a malformed one is refused with BadRequest naming the field, and a rank's log line is cleaned and
capped the same way whichever launcher prints it.

  /hosts  {"rank"}                        -> {"add": [[host, n]] the job may grow into, "assign": {host: {"new",
                                          "slots"}} what each host's new processes are told, "forward": [env names]
                                          they are given, "size", "drivers" (tfringrun), and the source's own fields}
  /reset  {"hosts", "slots", "reason"}    the members after a shrink or before a growth: each rank's host, in rank
                                          order, and (Spark/Ray) its slot index
  /log    {"message"}                     one line on the launcher's stderr
  /start  {"rank", "size", "launch"?}     a rank started tfring (so a job whose ranks all vanish, exiting
                                          inside MPI without a report, is not taken for a success)
  /exit   {"rank", "size", "code",        a rank's status as it exits ("launch": the launcher's mpirun run it
           "launch"?}                     belongs to, when the launcher numbers them: a late report of an earlier
                                          run is not counted for the next)
  /end    {"rank", "host", "pid"}         end a rank that stopped responding with no live rank on its host (the
                                          launcher checks that the process is one of this job's first)
  /silent {"rank", "host", "pid",         this rank (its world rank, host, pid) saw the "silent" ranks stop
           "silent": [{"rank", "host",    responding past the stall deadline and asks to go on without them: "ok"
           "pid"}]}                       unless this rank was itself declared silent first (the launcher is the
                                          arbiter between sides of a cut link; a rank that cannot reach it ends)"""
from tfring.common.signed_channel import BadRequest

HOSTS, RESET, LOG, START, EXIT, END, SILENT = "/hosts", "/reset", "/log", "/start", "/exit", "/end", "/silent"
MAX_SILENT = 4096  # ranks one /silent request may name
REASONS = ("failure", "grow")
MAX_LOG_MESSAGE = 2000  # characters of a rank's /log line


def integer(payload, key, minimum=0):
    """payload[key] as an int >= minimum (bool is not an int here).

    Raises:
        BadRequest: naming the key and the value.
    """
    value = payload.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest("'%s' must be an integer >= %d, got %r" % (key, minimum, value))
    return value


def hosts_request(rank):
    return {"rank": int(rank)}


def check_hosts(payload):
    """The asking rank of a /hosts request."""
    return integer(payload, "rank")


def reset_request(hosts, slots, reason):
    return {"hosts": list(hosts), "slots": list(slots), "reason": reason}


def check_reset(payload):
    """(hosts, slots, reason) of a /reset request: a non-empty list of host names, a list of slot indexes (empty
    outside Spark/Ray), "failure" or "grow"."""
    hosts, slots, reason = payload.get("hosts"), payload.get("slots", []), payload.get("reason")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise BadRequest("'hosts' must be a non-empty list of host names")
    if not isinstance(slots, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in slots):
        raise BadRequest("'slots' must be a list of slot indexes")
    if reason not in REASONS:
        raise BadRequest("'reason' must be 'failure' or 'grow'")
    return hosts, slots, reason


def log_request(message):
    return {"message": str(message)}


def check_log(payload):
    """A /log request's message as one printable line of at most MAX_LOG_MESSAGE characters."""
    message = payload.get("message")
    if not isinstance(message, str):
        raise BadRequest("'message' must be a string")
    return "".join(c if c.isprintable() else " " for c in " ".join(message.split()))[:MAX_LOG_MESSAGE]


def _with_launch(request, launch):
    return request if launch is None else dict(request, launch=int(launch))


def launch_of(payload):
    """A /start or /exit request's optional "launch" (None when absent)."""
    return None if payload.get("launch") is None else integer(payload, "launch")


def start_request(rank, size, launch=None):
    return _with_launch({"rank": int(rank), "size": int(size)}, launch)


def check_start(payload):
    """(rank, size, launch) of a /start request, rank in [0, size), launch an int or None."""
    rank, size = integer(payload, "rank"), integer(payload, "size", minimum=1)
    if rank >= size:
        raise BadRequest("'rank' %d is outside [0, 'size' %d)" % (rank, size))
    return rank, size, launch_of(payload)


def exit_request(rank, size, code, launch=None):
    return _with_launch({"rank": int(rank), "size": int(size), "code": int(code)}, launch)


def check_exit(payload):
    """(rank, size, code, launch) of an /exit request, rank in [0, size), launch an int or None."""
    values = [payload.get(k) for k in ("rank", "size", "code")]
    if any(not isinstance(v, int) or isinstance(v, bool) for v in values):
        raise BadRequest("'rank', 'size' and 'code' must be integers")
    rank, size, code = values
    if not 0 <= rank < size:
        raise BadRequest("'rank' %d is outside [0, 'size' %d)" % (rank, size))
    return rank, size, code, launch_of(payload)


def end_request(rank, host, pid):
    return {"rank": int(rank), "host": str(host), "pid": int(pid)}


def check_end(payload):
    """(rank, host, pid) of an /end request: a rank number, a host name (no spaces, not an option), a pid > 1."""
    rank, pid, host = integer(payload, "rank"), integer(payload, "pid", minimum=2), payload.get("host")
    if (not isinstance(host, str) or not host or host.startswith("-") or not host.isprintable()
            or any(c.isspace() for c in host)):
        raise BadRequest("'host' must be a host name, got %r" % (host,))
    return rank, host, pid


def silent_request(me, silent):
    """me: (rank, host, pid) of the asking rank; silent: [(rank, host, pid)] of those that stopped responding."""
    return dict(end_request(*me), silent=[end_request(*s) for s in silent])


def check_silent(payload):
    """((rank, host, pid), [(rank, host, pid)]) of a /silent request: the asking rank and at least one silent one."""
    silent = payload.get("silent")
    if not isinstance(silent, list) or not 0 < len(silent) <= MAX_SILENT or \
            not all(isinstance(s, dict) for s in silent):
        raise BadRequest("'silent' must be a list of 1 to %d {rank, host, pid} objects" % MAX_SILENT)
    return check_end(payload), [check_end(s) for s in silent]
