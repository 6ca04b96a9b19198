"""The channel between `tfringrun`'s elastic driver and the ranks: JSON objects POSTed over HTTP, each request and
each response signed with HMAC-SHA256 under a per-job secret that the launcher hands to every rank in the
environment (`TFRING_ELASTIC_SECRET`, forwarded by name only: it never appears on a command line or in a log).

Nothing received is ever unpickled or evaluated: a request is refused (403 without a valid signature or when
stale or replayed, 400 when it is too big, not a JSON object or for an unknown path) with one log line that names
the peer and the reason. A request's signature covers its path, a nonce (wall-clock time + random) and its body:
it cannot be replayed, nor sent to another path; a reply's covers its status, the request's path and nonce and its
body: it answers that request only. The nonce's time must be within FRESHNESS of the receiver's clock."""
import hashlib
import hmac
import http.client
import http.server
import json
import os
import secrets
import socket
import sys
import threading
import time

SECRET_ENV = "TFRING_ELASTIC_SECRET"
DRIVER_ENV = "TFRING_ELASTIC_DRIVER"
SIGNATURE_HEADER = "X-Tfring-Signature"
NONCE_HEADER = "X-Tfring-Nonce"
FRESHNESS = 300.0  # seconds a request's nonce stays acceptable either way (the job's hosts' clocks may differ)
MAX_BODY = 1 << 20  # bytes, requests and responses
REQUEST_TIMEOUT = 10.0  # seconds a client has to send its whole request


class ProtocolError(RuntimeError):
    """The driver could not be reached, refused the request, or sent an unsigned or malformed reply."""


class BadRequest(ValueError):
    """Raised by a handler for a payload it cannot use (wrong keys or types): the client gets a 400."""


def new_secret():
    """A fresh per-job secret.

    Returns:
        str: 64 hex digits (32 random bytes).
    """
    return secrets.token_hex(32)


def _key(secret):
    try:
        key = bytes.fromhex(secret)
    except (TypeError, ValueError):
        raise ValueError("%s: expected a hex string" % SECRET_ENV) from None
    if len(key) < 16:
        raise ValueError("%s: expected at least 16 bytes (32 hex digits), got %d bytes" % (SECRET_ENV, len(key)))
    return key


def sign(secret, body):
    """The signature of a message body.

    Args:
        secret: the job's secret (hex string).
        body: the bytes sent.

    Returns:
        str: hex HMAC-SHA256 of body keyed with the secret's bytes.

    Raises:
        ValueError: the secret is not a hex string of at least 16 bytes.
    """
    return hmac.new(_key(secret), body, hashlib.sha256).hexdigest()


def verify(secret, body, signature):
    """Whether a signature is the body's (constant-time comparison).

    Args:
        secret: the job's secret (hex string).
        body: the bytes received.
        signature: the header's value (None when it was missing).

    Returns:
        bool: True only for the exact signature.
    """
    return isinstance(signature, str) and hmac.compare_digest(sign(secret, body), signature.strip().lower())


def new_nonce():
    """A request's nonce: the wall-clock time in ns and 96 random bits.

    Returns:
        str: "<time_ns>.<24 hex digits>".
    """
    return "%d.%s" % (time.time_ns(), secrets.token_hex(12))


def _message(kind, path, nonce, body):
    # What is signed: the direction (and a reply's status), the path and the nonce bind a body to one exchange.
    return b"\n".join([kind.encode(), path.encode("utf-8", "surrogateescape"), nonce.encode(), body])


def request_headers(secret, path, body, nonce=None):
    """The headers that authenticate a request.

    Args:
        secret: the job's secret (hex string).
        path: the request's path, e.g. "/hosts".
        body: the bytes sent.
        nonce: the nonce to use (default a fresh one).

    Returns:
        dict: {NONCE_HEADER: nonce, SIGNATURE_HEADER: signature}.
    """
    nonce = nonce or new_nonce()
    return {NONCE_HEADER: nonce, SIGNATURE_HEADER: sign(secret, _message("request", path, nonce, body))}


def reply_signature(secret, path, nonce, status, body):
    """The signature of a reply to the request (path, nonce).

    Args:
        secret: the job's secret (hex string).
        path: the request's path.
        nonce: the request's nonce ("" when it had none).
        status: the HTTP status sent.
        body: the bytes sent.

    Returns:
        str: hex HMAC-SHA256.
    """
    return sign(secret, _message("reply %d" % status, path, nonce, body))


def verify_reply(secret, path, nonce, status, body, signature):
    """Whether a reply's signature is the one for this request (path, nonce) and this status and body.

    Args:
        secret: the job's secret (hex string).
        path: the request's path.
        nonce: the request's nonce.
        status: the HTTP status received.
        body: the bytes received.
        signature: the reply's signature header (None when missing).

    Returns:
        bool: True only for the exact signature.
    """
    return isinstance(signature, str) and hmac.compare_digest(reply_signature(secret, path, nonce, status, body),
                                                              signature.strip().lower())


class _Nonces:
    """The nonces seen within the freshness window: a request is accepted once, and only while fresh."""

    def __init__(self):
        self._seen, self._lock = {}, threading.Lock()

    def accept(self, nonce):
        stamp, _, rand = nonce.partition(".")
        if not (stamp.isascii() and stamp.isdigit() and len(rand) == 24):
            return "malformed nonce"
        now = time.time()
        if abs(now - int(stamp) / 1e9) > FRESHNESS:
            return "stale request (nonce time %.0f s from this host's clock)" % (int(stamp) / 1e9 - now)
        with self._lock:
            if nonce in self._seen:
                return "replayed request"
            if len(self._seen) > 10000:  # forget what has expired: those are refused as stale anyway
                self._seen = {n: t for n, t in self._seen.items() if t > now - 2 * FRESHNESS}
            self._seen[nonce] = now
        return None


def _encode(obj):
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _parse_address(address):
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("%s: expected host:port, got %r" % (DRIVER_ENV, address))
    return host.strip("[]"), int(port)


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "tfring-elastic"
    sys_version = ""
    timeout = REQUEST_TIMEOUT  # a client that stalls mid-request loses its connection, not a thread forever
    protocol_version = "HTTP/1.0"

    def log_message(self, format, *args):
        pass  # http.server's per-request lines: refusals and failures are logged explicitly instead

    def log_error(self, format, *args):  # malformed HTTP (http.server answers it unsigned), timeouts
        why = (format % args)[:200]
        self.server.say("%s refused a request from %s: %s" % (self.server.name, self.client_address[0], why))

    def _reply(self, status, obj):
        body = _encode(obj)
        nonce = getattr(self, "headers", None) and self.headers.get(NONCE_HEADER)
        nonce = nonce if isinstance(nonce, str) and len(nonce) <= 64 and nonce.isascii() else ""
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header(SIGNATURE_HEADER, reply_signature(self.server.secret, self.path, nonce, status, body))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client went away

    def _refuse(self, status, why):
        self.server.say("%s refused a request from %s: %s" % (self.server.name, self.client_address[0], why))
        self._reply(status, {"error": why})

    def _not_post(self):
        self._refuse(405, "method %r not allowed (POST only)" % self.command[:20])

    do_GET = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _not_post

    def do_POST(self):
        length = self.headers.get("Content-Length")
        if length is None or not (length.strip().isascii() and length.strip().isdigit()):
            return self._refuse(400, "missing or invalid Content-Length")
        if int(length) > self.server.max_body:
            return self._refuse(400, "body of %s bytes is over the %d-byte limit" % (int(length), self.server.max_body))
        try:
            body = self.rfile.read(int(length))
        except OSError:
            return self._refuse(400, "body not received within %g s" % self.timeout)
        if len(body) != int(length):
            return self._refuse(400, "body shorter than its Content-Length")
        signature, nonce = self.headers.get(SIGNATURE_HEADER), self.headers.get(NONCE_HEADER)
        if signature is None:
            return self._refuse(403, "missing signature")
        if nonce is None:
            return self._refuse(403, "missing nonce")
        if not verify(self.server.secret, _message("request", self.path, nonce, body), signature):
            return self._refuse(403, "bad signature")
        stale = self.server.nonces.accept(nonce)
        if stale:
            return self._refuse(403, stale)
        handler = self.server.handlers.get(self.path)
        if handler is None:
            return self._refuse(400, "unknown path %r" % self.path[:100])
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            payload = None
        if not isinstance(payload, dict):
            return self._refuse(400, "body is not a JSON object")
        try:
            result = handler(payload)
        except BadRequest as e:
            return self._refuse(400, "bad payload for %s: %s" % (self.path, e))
        except Exception as e:  # any handler bug becomes a 500; the driver goes on
            self.server.say("%s: handler %s failed: %s: %s" % (self.server.name, self.path, type(e).__name__, e))
            return self._reply(500, {"error": "handler failed"})
        if not isinstance(result, dict):
            self.server.say("%s: handler %s returned %s, not a dict" % (self.server.name, self.path,
                                                                        type(result).__name__))
            return self._reply(500, {"error": "handler failed"})
        self._reply(200, result)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False


class DriverServer:
    """The driver's HTTP endpoint: authenticated JSON requests dispatched to handlers.

    Args:
        bind_host: the address to listen on (an interface's address, or 127.0.0.1 when every rank is local;
            never 0.0.0.0). The port is chosen by the OS.
        secret: the job's secret (hex string, see `new_secret`).
        handlers: {path: callable(dict) -> dict}, e.g. {"/hosts": ...}. A handler raises `BadRequest` for an
            unusable payload (400); any other exception is a 500.
        log: where refusals and handler failures are written, one line each (default sys.stderr).
        name: what the log lines call this server (other services reuse the protocol, e.g. tfring.runner.slots).
        max_body: the largest request accepted, in bytes (default MAX_BODY, 1 MiB).

    Raises:
        ValueError: a wildcard bind address or a bad secret.
        OSError: the address cannot be bound.
    """

    def __init__(self, bind_host, secret, handlers, log=None, name="elastic driver", max_body=MAX_BODY):
        if bind_host in ("", "0.0.0.0", "::"):
            raise ValueError("DriverServer: refusing to listen on every interface (%r)" % bind_host)
        _key(secret)
        self._log = log
        self._log_lock = threading.Lock()
        self._httpd = _Server((bind_host, 0), _Handler)
        self._httpd.secret, self._httpd.handlers, self._httpd.say = secret, dict(handlers), self.say
        self._httpd.name, self._httpd.max_body, self._httpd.nonces = name, int(max_body), _Nonces()
        self._thread = None

    @property
    def address(self):
        """Where ranks reach the server.

        Returns:
            str: "host:port".
        """
        host, port = self._httpd.server_address[:2]
        return "%s:%d" % (host, port)

    def say(self, message):
        """Writes one `tfringrun: ` line to the log.

        Args:
            message: the text (newlines are flattened).
        """
        out = self._log or sys.stderr
        with self._log_lock:
            out.write("tfringrun: %s\n" % " ".join(str(message).split()))
            out.flush()

    def start(self):
        """Serves requests on a daemon thread.

        Returns:
            DriverServer: self.
        """
        if self._thread is None:
            self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                            name="tfring-" + self._httpd.name.replace(" ", "-"), daemon=True)
            self._thread.start()
        return self

    def stop(self):
        """Stops serving and closes the socket (waits at most a few seconds)."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()


class DriverClient:
    """A rank's side of the channel.

    Args:
        address: the driver's "host:port".
        secret: the job's secret (hex string).
        timeout: seconds one call may take in all (connect, send, receive).
        name: what error messages call the server.
        max_body: the largest reply accepted, in bytes (default MAX_BODY, 1 MiB).

    Raises:
        ValueError: a malformed address or secret.
    """

    def __init__(self, address, secret, timeout=10.0, name="elastic driver", max_body=MAX_BODY):
        self.host, self.port = _parse_address(address)
        self.address = "%s:%d" % (self.host, self.port)
        _key(secret)
        self._secret, self.timeout = secret, float(timeout)
        self.name, self.max_body = name, int(max_body)

    def call(self, path, payload):
        """POSTs a JSON object to the driver and returns its verified reply.

        Args:
            path: the handler, e.g. "/hosts".
            payload: a JSON-serialisable dict.

        Returns:
            dict: the driver's reply.

        Raises:
            ProtocolError: the driver cannot be reached within the timeout, refused the request, or its reply is
                unsigned, wrongly signed, too big or not a JSON object.
        """
        body = _encode(payload)
        where = "%s at %s (%s)" % (self.name, self.address, path)
        deadline = time.monotonic() + self.timeout

        def left():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("timed out")
            return remaining

        conn = http.client.HTTPConnection(self.host, self.port, timeout=left())
        try:
            conn.connect()
            conn.sock.settimeout(left())
            nonce = new_nonce()
            conn.request("POST", path, body=body, headers=dict(request_headers(self._secret, path, body, nonce),
                                                               **{"Content-Type": "application/json"}))
            conn.sock.settimeout(left())  # also bounds each read of the reply; the loop checks the deadline
            response = conn.getresponse()
            chunks, size = [], 0
            while size <= self.max_body:
                left()
                chunk = response.read(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            reply = b"".join(chunks)
            signature = response.getheader(SIGNATURE_HEADER)
        except (OSError, http.client.HTTPException) as e:
            raise ProtocolError("%s: no answer: %s (deadline %g s)" % (where, str(e) or type(e).__name__,
                                                                      self.timeout)) from None
        finally:
            conn.close()
        if len(reply) > self.max_body:
            raise ProtocolError("%s: reply over %d bytes" % (where, self.max_body))
        if not verify_reply(self._secret, path, nonce, response.status, reply, signature):
            raise ProtocolError("%s: reply %s (HTTP %d)" % (
                where, "unsigned" if signature is None else "with a bad signature", response.status))
        try:
            obj = json.loads(reply)
        except (UnicodeDecodeError, ValueError):
            obj = None
        if not isinstance(obj, dict):
            raise ProtocolError("%s: reply is not a JSON object (HTTP %d)" % (where, response.status))
        if response.status != 200:
            raise ProtocolError("%s: refused with HTTP %d: %s" % (where, response.status, obj.get("error")))
        return obj


def client_from_env(environ=None, timeout=10.0):
    """The client for the driver that started this rank, from the environment.

    Args:
        environ: the environment to read (default os.environ).
        timeout: seconds per call.

    Returns:
        DriverClient | None: None when TFRING_ELASTIC_DRIVER is not set (not under an elastic tfringrun).

    Raises:
        ProtocolError: TFRING_ELASTIC_DRIVER is set but the secret is missing, or either is malformed.
    """
    env = os.environ if environ is None else environ
    address = env.get(DRIVER_ENV)
    if not address:
        return None
    secret = env.get(SECRET_ENV)
    if not secret:
        raise ProtocolError("%s is set but %s is not: the launcher forwards both" % (DRIVER_ENV, SECRET_ENV))
    try:
        return DriverClient(address, secret, timeout=timeout)
    except ValueError as e:
        raise ProtocolError(str(e)) from None
