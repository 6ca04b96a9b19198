"""Prometheus metrics from rank 0: with TFRING_METRICS_PORT (tfringrun --metrics-port) set, rank 0 serves the
monitor's job-wide summary (monitor.metrics(): every rank's wait, transfer time, bytes, collectives, bus bandwidth,
the step time, the slowest rank and the straggler) and the elastic events (resets, size, ranks lost and added) at
http://ADDRESS:PORT/metrics in Prometheus' text format, read at scrape time. The endpoint binds only to the job's
address (TFRING_METRICS_ADDRESS; default 127.0.0.1 when every rank is on one host, else rank 0's host name's
address), answers only `Authorization: Bearer <token>` (bearer_server.py) and restarts with the runtime (an elastic
reset re-initializes it; the new rank 0 serves). The token: $TFRING_METRICS_TOKEN (the launcher passes it by name),
else the file TFRING_METRICS_TOKEN_FILE, written with a new token (mode 0600) when it does not exist yet."""
import os
import secrets
import socket
import sys

from tfring.common import knobs, launch_env, topology

PORT = "TFRING_METRICS_PORT"
ADDRESS = "TFRING_METRICS_ADDRESS"
TOKEN_FILE = "TFRING_METRICS_TOKEN_FILE"
_server = None


def port(environ=None):
    """The endpoint's port from TFRING_METRICS_PORT (0: no endpoint).

    Raises:
        ValueError: not an integer in [0, 65535], naming the variable and the value.
    """
    raw, var = knobs.value(PORT, environ)
    try:
        value = int(raw or 0)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise ValueError("tfring: %s=%r: expected a port number in [0, 65535] (0: no metrics endpoint)"
                         % (var or PORT, raw))
    return value


def token_file(environ=None):
    """The token file's absolute path (TFRING_METRICS_TOKEN_FILE, default ~/.tfring/metrics-token)."""
    return os.path.abspath(os.path.expanduser(knobs.value(TOKEN_FILE, environ)[0] or "~/.tfring/metrics-token"))


def read_or_create_token(path):
    """The bearer token in `path`; a new random one written there first (mode 0600, atomically) when the file does
    not exist.

    Raises:
        ValueError: the file holds fewer than 16 characters, or cannot be read or written (naming it).
    """
    try:
        with open(path) as f:
            token = f.read().strip()
        if os.stat(path).st_mode & 0o077:
            sys.stderr.write("tfring: warning: the metrics token file %s can be read by other users (chmod 600)\n"
                             % path)
    except FileNotFoundError:
        token = secrets.token_urlsafe(32)
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            tmp = "%s.%d.tmp" % (path, os.getpid())
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
            os.replace(tmp, path)  # another process writing at once: one of the two files wins, read it back
            with open(path) as f:
                token = f.read().strip()
        except OSError as e:
            raise ValueError("tfring: %s=%s: cannot write the metrics token there: %s" % (TOKEN_FILE, path, e)) \
                from None
    except OSError as e:
        raise ValueError("tfring: %s=%s: cannot read the metrics token: %s" % (TOKEN_FILE, path, e)) from None
    if len(token) < 16:
        raise ValueError("tfring: %s=%s: the token must have at least 16 characters" % (TOKEN_FILE, path))
    return token


def token(environ=None):
    """The bearer token: $TFRING_METRICS_TOKEN (set by tfringrun), else the token file's (created if missing)."""
    env = os.environ if environ is None else environ
    return env.get(launch_env.METRICS_TOKEN) or read_or_create_token(token_file(env))


def bind_address(environ=None):
    """TFRING_METRICS_ADDRESS, else 127.0.0.1 for a job on one host, else the address of this host's name.

    Raises:
        ValueError: a wildcard address (every interface), naming the variable.
    """
    raw, var = knobs.value(ADDRESS, environ)
    if raw in ("0.0.0.0", "::", "*"):
        raise ValueError("tfring: %s=%s: the metrics endpoint binds to the job's interface only, not to every "
                         "interface" % (var, raw))
    if raw:
        return raw
    if topology.local_size() == topology.size():
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


def on_init():
    """After init: rank 0 starts the endpoint when TFRING_METRICS_PORT is set (every rank checks the settings)."""
    global _server
    wanted = port()
    if not wanted:
        return
    address = bind_address()
    if topology.rank() != 0 or _server is not None:
        return
    from tfring.common.bearer_server import BearerServer
    from tfring.common.metrics_exposition import exposition
    try:
        _server = BearerServer(address, wanted, token(), {"/metrics": exposition}, name="metrics endpoint").start()
    except OSError as e:
        raise RuntimeError("tfring: %s=%d: rank 0 cannot serve metrics on %s: %s" % (PORT, wanted, address, e)) \
            from None
    sys.stderr.write("tfring: metrics for Prometheus at http://%s/metrics (bearer token: %s)\n" % (
        _server.address, "$" + launch_env.METRICS_TOKEN if os.environ.get(launch_env.METRICS_TOKEN)
        else token_file()))


def on_shutdown():
    """At shutdown (an elastic reset too): the endpoint stops with the runtime."""
    global _server
    if _server is not None:
        _server.stop()
        _server = None


def address():
    """"host:port" of this process's endpoint, or None (not rank 0, or no TFRING_METRICS_PORT)."""
    return None if _server is None else _server.address
