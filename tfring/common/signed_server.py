"""The signed channel's server (signed_channel.py holds the protocol and the client), built to bound what a peer
without the job's secret can cost (issue #31):
- one thread runs an asyncio loop for every connection; h11 parses HTTP; each signed request's handler runs on a
  thread of its own (handlers may long-poll; signed requests are bounded by the connection limits);
- at most `max_connections` open connections, `per_peer` from one address: a new one closes the oldest that has
  not sent a signed head yet (from the address holding most of those), so idle or dripping peers cannot lock signed
  requests out; it is refused when every connection is signed;
- the request line and headers are at most HEAD_LIMIT bytes, the whole request must arrive within
  REQUEST_TIMEOUT (not per read: a peer dripping a byte at a time is cut off);
- the signature covers the path, the nonce and the body's SHA-256, all in the headers: it is checked before a
  byte of the body is read, and the body is read only up to its declared, bounded length;
- refusals are logged at most once per LOG_INTERVAL, with a count of the ones not logged.
An unsigned connection holds at most HEAD_LIMIT + READ_SIZE bytes (32 KiB): memory an attacker can hold grows with
the limits, i.e. with `clients` (2 x 32 KiB per rank)."""
import asyncio
import collections
import hashlib
import json
import socket
import sys
import threading
import time

import h11

from tfring.common import signed_channel as channel
from tfring.common.signed_channel import BadRequest

HEAD_LIMIT = 16384  # bytes of request line + headers
MAX_CONNECTIONS = 64
PER_PEER = 16
BACKLOG = 128  # socketserver's 5 made a burst of idle connections delay signed requests by a second
LOG_INTERVAL = 10.0  # seconds between refusal lines
READ_SIZE = 16384
REQUEST_TIMEOUT = channel.REQUEST_TIMEOUT


class _Refused(Exception):
    def __init__(self, status, why):
        super().__init__(why)
        self.status, self.why = status, why


class _Nonces:
    """The nonces seen within the freshness window: a request is accepted once, and only while fresh."""

    def __init__(self):
        self._seen, self._lock = {}, threading.Lock()

    def accept(self, nonce):
        stamp, _, rand = nonce.partition(".")
        if not (stamp.isascii() and stamp.isdigit() and len(stamp) < 25 and len(rand) == 24):
            return "malformed nonce"
        now = time.time()
        if abs(now - int(stamp) / 1e9) > channel.FRESHNESS:
            return "stale request (nonce time %.0f s from this host's clock)" % (int(stamp) / 1e9 - now)
        with self._lock:
            if nonce in self._seen:
                return "replayed request"
            if len(self._seen) > 10000:  # forget what has expired: those are refused as stale anyway
                self._seen = {n: t for n, t in self._seen.items() if t > now - 2 * channel.FRESHNESS}
            self._seen[nonce] = now
        return None


class _RefusalLog:
    """Refusal lines, at most one per interval: a flood costs one line per interval, with a count."""

    def __init__(self, say, name, interval):
        self._say, self._name, self._interval = say, name, interval
        self._last, self._more, self._lock = None, 0, threading.Lock()

    def refuse(self, peer, why):
        now = time.monotonic()
        with self._lock:
            if self._last is not None and now - self._last < self._interval:
                self._more += 1
                return
            more, self._more, self._last = self._more, 0, now
        self._say("%s refused a request from %s: %s%s" % (self._name, peer, why[:200], (
            " (and %d more refused in the last %g s, not logged)" % (more, self._interval) if more else "")))

    def flush(self):
        with self._lock:
            more, self._more = self._more, 0
        if more:
            self._say("%s refused %d more requests (not logged)" % (self._name, more))


class DriverServer:
    """An authenticated JSON endpoint: signed POST requests dispatched to handlers (signed_channel's protocol).

    Args:
        bind_host: the address to listen on (an interface's address, or 127.0.0.1 when every rank is local;
            never 0.0.0.0). The port is chosen by the OS.
        secret: the job's secret (hex string, see `signed_channel.new_secret`).
        handlers: {path: callable(dict) -> dict}, e.g. {"/hosts": ...}. A handler raises `BadRequest` for an
            unusable payload (400); any other exception is a 500.
        port: the port to listen on (default 0: the OS chooses).
        log: where refusals and handler failures are written, one line each (default sys.stderr).
        name: what the log lines call this server (other services reuse the protocol, e.g. tfring.runner.slots).
        max_body: the largest request body accepted, in bytes (default MAX_BODY, 1 MiB).
        backlog: the listen backlog (default BACKLOG; size it for the job's number of ranks or slots).
        max_connections: connections open at once, in all (default MAX_CONNECTIONS).
        per_peer: connections open at once from one address (default PER_PEER).
        clients: how many processes of the job may call at once (ranks, slots): the three limits above are
            raised to fit them all (backlog and connections 2x, per address 1x), so a job's own burst is never
            capped.

    Raises:
        ValueError: a wildcard bind address, a bad secret or a limit below 1.
        OSError: the address cannot be bound.
    """

    def __init__(self, bind_host, secret, handlers, log=None, name="elastic driver", max_body=channel.MAX_BODY,
                 backlog=BACKLOG, max_connections=MAX_CONNECTIONS, per_peer=PER_PEER, clients=0, port=0):
        if bind_host in ("", "0.0.0.0", "::"):
            raise ValueError("DriverServer: refusing to listen on every interface (%r)" % bind_host)
        channel.sign(secret, b"")  # validates the secret
        for arg, value in (("max_body", max_body), ("backlog", backlog), ("max_connections", max_connections),
                           ("per_peer", per_peer)):
            if int(value) < 1:
                raise ValueError("DriverServer: %s must be at least 1, got %r" % (arg, value))
        backlog, max_connections = max(int(backlog), 2 * int(clients)), max(int(max_connections), 2 * int(clients))
        per_peer = max(int(per_peer), int(clients))
        self.name, self._secret, self._handlers = name, secret, dict(handlers)
        self.max_body, self.max_connections, self.per_peer = int(max_body), int(max_connections), int(per_peer)
        self._log, self._log_lock = log, threading.Lock()
        self._refusals = _RefusalLog(self.say, name, LOG_INTERVAL)
        self._nonces = _Nonces()
        family = socket.getaddrinfo(bind_host, 0, type=socket.SOCK_STREAM)[0][0]
        self._sock = socket.create_server((bind_host, int(port)), family=family, backlog=int(backlog))
        # Touched on the loop's thread only: open connections, per address, and those whose head is not verified
        # yet (oldest first).
        self._open, self._from, self._unverified = 0, collections.Counter(), collections.OrderedDict()
        self._thread = self._loop = None
        self._backlog, self._failed = int(backlog), None

    @property
    def address(self):
        """Where ranks reach the server.

        Returns:
            str: "host:port".
        """
        host, port = self._sock.getsockname()[:2]
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
            ready = threading.Event()
            self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True,
                                            name="tfring-" + self.name.replace(" ", "-"))
            self._thread.start()
            if not ready.wait(10):
                raise TimeoutError("DriverServer %s: the server thread did not start within 10 s" % self.name)
            if self._failed is not None:
                raise self._failed
        return self

    def stop(self):
        """Stops serving and closes the socket (waits at most a few seconds)."""
        if self._thread is not None:
            loop = self._loop
            if loop is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(loop.stop)
                except RuntimeError:  # closed meanwhile
                    pass
            self._thread.join(timeout=5)
            self._thread = None
            self._refusals.flush()
        self._sock.close()

    def _serve(self, ready):
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            try:
                server = loop.run_until_complete(asyncio.start_server(self._connection, sock=self._sock,
                                                                      backlog=self._backlog))
            except Exception as e:  # raised by start()
                self._failed = e
                return
            ready.set()
            loop.run_forever()
            server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        finally:
            ready.set()
            loop.close()

    async def _connection(self, reader, writer):
        peer = (writer.get_extra_info("peername") or ("unknown",))[0]
        if self._open >= self.max_connections or self._from[peer] >= self.per_peer:
            # Make room by closing the oldest connection not yet authenticated (from this peer when it is the
            # peer's cap): idle or dripping peers cannot lock signed requests out; refuse only when none is.
            victim = peer
            if self._from[peer] < self.per_peer and self._unverified:
                counts = collections.Counter(self._unverified.values())  # the address holding most gives one up
                victim = max(counts, key=counts.get)
            oldest = next((w for w, p in self._unverified.items() if p == victim), None)
            if oldest is None:
                self._refusals.refuse(peer, "too many connections (%d open, %d from this address; limits %d "
                                            "and %d)" % (self._open, self._from[peer], self.max_connections,
                                                         self.per_peer))
                writer.transport.abort()
                return
            self._refusals.refuse(self._unverified.pop(oldest), "unauthenticated connection closed to make room "
                                  "(limits: %d connections, %d per address)" % (self.max_connections, self.per_peer))
            oldest.transport.abort()
        self._open += 1
        self._from[peer] += 1
        self._unverified[writer] = peer
        try:
            await self._exchange(reader, writer, peer)
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the peer went away or did not read the reply in time, or the server stops
        finally:
            self._unverified.pop(writer, None)
            self._open -= 1
            self._from[peer] -= 1
            if not self._from[peer]:
                del self._from[peer]
            writer.transport.abort()

    async def _exchange(self, reader, writer, peer):
        loop = asyncio.get_running_loop()
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
        deadline = loop.time() + REQUEST_TIMEOUT
        path = nonce = ""
        try:
            request = await self._next_event(conn, reader, deadline)
            if isinstance(request, h11.ConnectionClosed):
                return  # connected and left: nothing to answer
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers}
            path, nonce = request.target.decode("latin-1"), headers.get(channel.NONCE_HEADER.lower())
            handler, received = self._check_head(request.method, path, headers, nonce), bytearray()
            self._unverified.pop(writer, None)  # signed: never closed to make room
            length = int(headers["content-length"])
            while len(received) < length:
                event = await self._next_event(conn, reader, deadline)
                if not isinstance(event, h11.Data):
                    raise _Refused(400, "body shorter than its Content-Length")
                received += event.data
            if hashlib.sha256(received).hexdigest() != headers[channel.DIGEST_HEADER.lower()].strip().lower():
                raise _Refused(403, "body does not match its signed digest")
            try:
                payload = json.loads(received)
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                payload = None
            if not isinstance(payload, dict):
                raise _Refused(400, "body is not a JSON object")
        except _Refused as e:
            self._refusals.refuse(peer, e.why)
            status, body = e.status, channel.encode({"error": e.why})
        except h11.RemoteProtocolError as e:
            why = "malformed HTTP: %s" % (str(e) or type(e).__name__)
            self._refusals.refuse(peer, why)
            status, body = getattr(e, "error_status_hint", 400), channel.encode({"error": why})
        except asyncio.TimeoutError:
            self._refusals.refuse(peer, "request not received within %g s" % REQUEST_TIMEOUT)
            status, body = 408, channel.encode({"error": "request not received within %g s" % REQUEST_TIMEOUT})
        else:
            status, body = await self._in_thread(handler, path, payload, peer)
        nonce = nonce if isinstance(nonce, str) and len(nonce) <= 64 and nonce.isascii() else ""
        await self._reply(conn, writer, path, nonce, status, body)

    def _check_head(self, method, path, headers, nonce):
        """The handler for a request whose head is acceptable; raises _Refused otherwise (no body read yet)."""
        if method != b"POST":
            raise _Refused(405, "method %r not allowed (POST only)" % method.decode("latin-1")[:20])
        length = headers.get("content-length")
        if length is None:  # h11 checked the digits (at most 20): int() cannot fail
            raise _Refused(400, "missing or invalid Content-Length")
        if int(length) > self.max_body:
            raise _Refused(400, "body of %s bytes is over the %d-byte limit" % (int(length), self.max_body))
        signature = headers.get(channel.SIGNATURE_HEADER.lower())
        if signature is None:
            raise _Refused(403, "missing signature")
        if nonce is None:
            raise _Refused(403, "missing nonce")
        digest = headers.get(channel.DIGEST_HEADER.lower())
        if digest is None:
            raise _Refused(403, "missing body digest")
        if not channel.verify(self._secret, channel.signed_head(path, nonce, digest), signature):
            raise _Refused(403, "bad signature")
        stale = self._nonces.accept(nonce)
        if stale:
            raise _Refused(403, stale)
        handler = self._handlers.get(path)
        if handler is None:
            raise _Refused(400, "unknown path %r" % path[:100])
        return handler

    async def _next_event(self, conn, reader, deadline):
        loop = asyncio.get_running_loop()
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            left = deadline - loop.time()
            if left <= 0:
                raise asyncio.TimeoutError()
            conn.receive_data(await asyncio.wait_for(reader.read(READ_SIZE), left))

    async def _in_thread(self, *args):
        loop, done = asyncio.get_running_loop(), asyncio.Event()
        box = []

        def run():
            box.append(self._run(*args))
            try:
                loop.call_soon_threadsafe(done.set)
            except RuntimeError:  # the server stopped (its loop closed) while the handler ran: nobody to answer
                pass
        threading.Thread(target=run, daemon=True, name="tfring-handler").start()
        await done.wait()
        return box[0]

    def _run(self, handler, path, payload, peer):
        """(status, reply bytes) of a handler's call: 400 for BadRequest, 500 for anything else it raises."""
        try:
            result = handler(payload)
            if not isinstance(result, dict):
                raise TypeError("returned %s, not a dict" % type(result).__name__)
            return 200, channel.encode(result)
        except BadRequest as e:
            why = "bad payload for %s: %s" % (path, e)
            self._refusals.refuse(peer, why)
            return 400, channel.encode({"error": why})
        except Exception as e:  # any handler bug (or an unserialisable result) is a 500; the service goes on
            self.say("%s: handler %s failed: %s: %s" % (self.name, path, type(e).__name__, e))
            return 500, channel.encode({"error": "handler failed"})

    async def _reply(self, conn, writer, path, nonce, status, body):
        await self._send(conn, writer, status, body, "application/json",
                         [(channel.SIGNATURE_HEADER, channel.reply_signature(self._secret, path, nonce, status, body))])

    async def _send(self, conn, writer, status, body, content_type, extra_headers=()):
        """Writes one response and closes the connection (within REQUEST_TIMEOUT)."""
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), ("Connection", "close")]
        headers += list(extra_headers)
        try:
            data = conn.send(h11.Response(status_code=status, headers=headers)) + conn.send(h11.Data(data=body)) + \
                conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:  # no valid request line to answer
            return
        writer.write(data)
        writer.close()  # flushes what is buffered first; wait_closed() returns once it is sent
        await asyncio.wait_for(writer.wait_closed(), REQUEST_TIMEOUT)
