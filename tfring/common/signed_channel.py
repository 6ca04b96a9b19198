"""The channel between `tfringrun`'s elastic driver and the ranks: JSON objects POSTed over HTTP, each request and
each response signed with HMAC-SHA256 under a per-job secret that the launcher hands to every rank in the
environment (`TFRING_ELASTIC_SECRET`, forwarded by name only: it never appears on a command line or in a log).

Nothing received is ever unpickled or evaluated: the server (signed_server.py) refuses a request (403 without a
valid signature or when stale or replayed, 400 when it is too big, not a JSON object or for an unknown path) with a
log line that names the peer and the reason. A request's signature covers its path, a nonce (wall-clock time +
random) and its body's SHA-256 (a header: the server checks the signature before reading the body): it cannot be
replayed, nor sent to another path, nor carry another body; a reply's covers its status, the request's path and
nonce and its body: it answers that request only. The nonce's time must be within FRESHNESS of the receiver's
clock."""
import hashlib
import hmac
import http.client
import json
import os
import secrets
import socket
import time

SECRET_ENV = "TFRING_ELASTIC_SECRET"
DRIVER_ENV = "TFRING_ELASTIC_DRIVER"
SIGNATURE_HEADER = "X-Tfring-Signature"
NONCE_HEADER = "X-Tfring-Nonce"
DIGEST_HEADER = "X-Tfring-Body-Sha256"  # signed, so the server checks a request before reading its body
FRESHNESS = 300.0  # seconds a request's nonce stays acceptable either way (the job's hosts' clocks may differ)
MAX_BODY = 1 << 20  # bytes, requests and responses
REQUEST_TIMEOUT = 10.0  # seconds a client has to send its whole request


class ProtocolError(RuntimeError):
    """The driver could not be reached, refused the request, or sent an unsigned or malformed reply."""


class Unreachable(ProtocolError):
    """No answer within the deadline (connection refused, reset or timed out): nothing reached the caller."""


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


def signed_head(path, nonce, digest):
    """What a request's signature covers: its path, its nonce and its body's SHA-256 (all in the headers, so the
    server verifies a request before it reads the body).

    Args:
        path: the request's path.
        nonce: the request's nonce.
        digest: the hex SHA-256 of the body.

    Returns:
        bytes: the signed message.
    """
    return _message("request", path, nonce, digest.strip().lower().encode("ascii", "replace"))


def request_headers(secret, path, body, nonce=None):
    """The headers that authenticate a request.

    Args:
        secret: the job's secret (hex string).
        path: the request's path, e.g. "/hosts".
        body: the bytes sent.
        nonce: the nonce to use (default a fresh one).

    Returns:
        dict: {NONCE_HEADER: nonce, DIGEST_HEADER: the body's SHA-256, SIGNATURE_HEADER: signature}.
    """
    nonce, digest = nonce or new_nonce(), hashlib.sha256(body).hexdigest()
    return {NONCE_HEADER: nonce, DIGEST_HEADER: digest,
            SIGNATURE_HEADER: sign(secret, signed_head(path, nonce, digest))}


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


def encode(obj):
    """The canonical JSON bytes of a message (compact, sorted keys)."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _parse_address(address):
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("%s: expected host:port, got %r" % (DRIVER_ENV, address))
    return host.strip("[]"), int(port)


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
        body = encode(payload)
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
            raise Unreachable("%s: no answer: %s (deadline %g s)" % (where, str(e) or type(e).__name__,
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
