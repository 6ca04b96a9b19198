"""A read-only HTTP endpoint behind a bearer token (the Prometheus metrics endpoint, metrics_endpoint.py), on the
signed channel's server footing (signed_server.DriverServer): the same connection limits, head limit, one deadline per
request and rate-limited refusal log, so an unauthenticated peer costs what it costs the elastic driver. Only GET;
the token is compared in constant time before any handler runs; no body is ever read."""
import asyncio
import hmac
import sys

import h11

from tfring.common.signed_server import REQUEST_TIMEOUT, DriverServer, _Refused

MIN_TOKEN = 16  # characters: a token a scraper can guess is no token


class BearerServer(DriverServer):
    """GET endpoints answered only to `Authorization: Bearer <token>`.

    Args:
        bind_host: the address to listen on (never a wildcard).
        port: the port (0: the OS chooses).
        token: the bearer token (at least MIN_TOKEN characters).
        handlers: {path: callable() -> (content type, bytes)}; a query string is ignored.
        log, name, max_connections, per_peer: as DriverServer's.

    Raises:
        ValueError: a wildcard address or a short token.
        OSError: the address cannot be bound (e.g. the port is taken).
    """

    def __init__(self, bind_host, port, token, handlers, log=None, name="metrics endpoint", **limits):
        if not isinstance(token, str) or len(token.strip()) < MIN_TOKEN:
            raise ValueError("BearerServer: the token must have at least %d characters" % MIN_TOKEN)
        self._bearer = ("Bearer " + token.strip()).encode()
        super().__init__(bind_host, "0" * 64, handlers, log=log, name=name, port=port, **limits)

    def say(self, message):
        """Writes one `tfring: ` line (this server runs in a rank, not in tfringrun)."""
        with self._log_lock:
            out = self._log or sys.stderr
            out.write("tfring: %s\n" % " ".join(str(message).split()))
            out.flush()

    async def _exchange(self, reader, writer, peer):
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=16384)
        deadline = asyncio.get_running_loop().time() + REQUEST_TIMEOUT
        try:
            request = await self._next_event(conn, reader, deadline)
            if isinstance(request, h11.ConnectionClosed):
                return
            if request.method != b"GET":
                raise _Refused(405, "method %r not allowed (GET only)" % request.method.decode("latin-1")[:20])
            auth = dict(request.headers).get(b"authorization", b"")
            if not hmac.compare_digest(auth, self._bearer):
                raise _Refused(401, "missing or wrong bearer token")
            path = request.target.decode("latin-1").split("?", 1)[0]
            handler = self._handlers.get(path)
            if handler is None:
                raise _Refused(404, "unknown path %r" % path[:100])
            self._unverified.pop(writer, None)  # authenticated: never closed to make room
            status, (ctype, body) = 200, await asyncio.get_running_loop().run_in_executor(None, handler)
        except _Refused as e:
            self._refusals.refuse(peer, e.why)
            status, ctype, body = e.status, "text/plain; charset=utf-8", (e.why + "\n").encode()
        except h11.RemoteProtocolError as e:
            self._refusals.refuse(peer, "malformed HTTP: %s" % (str(e) or type(e).__name__))
            status, ctype, body = 400, "text/plain; charset=utf-8", b"malformed request\n"
        except asyncio.TimeoutError:
            self._refusals.refuse(peer, "request not received within %g s" % REQUEST_TIMEOUT)
            status, ctype, body = 408, "text/plain; charset=utf-8", b"request timeout\n"
        except Exception as e:  # a handler bug is a 500; the endpoint goes on
            self.say("%s: handler failed: %s: %s" % (self.name, type(e).__name__, e))
            status, ctype, body = 500, "text/plain; charset=utf-8", b"handler failed\n"
        await self._send(conn, writer, status, body, ctype,
                         [("WWW-Authenticate", 'Bearer realm="tfring"')] if status == 401 else [])
