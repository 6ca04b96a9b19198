"""The signed JSON channel (tfring.common.signed_channel) over real HTTP on 127.0.0.1, used by tfringrun's elastic
driver and the Spark/Ray slot services: HMAC-SHA256 over path, nonce and body; refusals (unsigned, forged, altered,
replayed, stale or future-dated, another path, malformed) each logged once; the client refusing forged, altered or
replayed replies."""
import hashlib
import hmac
import http.client
import http.server
import io
import json
import socket
import threading
import time

import pytest

from tfring.common import signed_channel as protocol
from tfring.common.signed_channel import BadRequest, DriverClient, ProtocolError, client_from_env, new_secret, sign
from tfring.common.signed_server import DriverServer

SECRET = new_secret()

@pytest.fixture
def server():
    log = io.StringIO()

    def boom(payload):
        raise KeyError("oops")

    def picky(payload):
        raise BadRequest("'x' must be an integer")

    srv = DriverServer("127.0.0.1", SECRET, {"/echo": lambda p: {"got": p}, "/boom": boom, "/picky": picky},
                       log=log).start()
    srv.log = log
    yield srv
    srv.stop()


def raw_post(address, path, body, headers, method="POST"):
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        if body:
            conn.send(body)
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.getheader(protocol.SIGNATURE_HEADER)
    finally:
        conn.close()


def signed_headers(body, secret=SECRET, path="/echo"):
    return dict(protocol.request_headers(secret, path, body), **{"Content-Length": str(len(body))})


def test_secret_and_signature_are_hmac_sha256():
    assert len(SECRET) == 64 and bytes.fromhex(SECRET) and new_secret() != SECRET
    want = hmac.new(bytes.fromhex(SECRET), b"{}", hashlib.sha256).hexdigest()
    assert sign(SECRET, b"{}") == want and sign(new_secret(), b"{}") != want
    assert protocol.verify(SECRET, b"{}", want) and not protocol.verify(SECRET, b"{} ", want)
    assert not protocol.verify(SECRET, b"{}", None)
    with pytest.raises(ValueError, match="hex"):
        sign("not hex", b"x")


def test_signed_round_trip(server):
    host, port = server.address.split(":")
    assert host == "127.0.0.1" and int(port) > 0
    reply = DriverClient(server.address, SECRET).call("/echo", {"rank": 3, "hosts": ["h1", "h2"]})
    assert reply == {"got": {"rank": 3, "hosts": ["h1", "h2"]}}
    assert server.log.getvalue() == ""


@pytest.mark.parametrize("case,status,why", [
    ("unsigned", 403, "missing signature"),
    ("wrong signature", 403, "bad signature"),
    ("other secret", 403, "bad signature"),
    ("not json", 400, "not a JSON object"),
    ("json array", 400, "not a JSON object"),
    ("oversized", 400, "over the 1048576-byte limit"),
    ("no length", 400, "missing or invalid Content-Length"),
    ("unknown path", 400, "unknown path '/nope'"),
    ("get", 405, "method 'GET' not allowed"),
    ("no nonce", 403, "missing nonce"),
    ("signed for another path", 403, "bad signature"),
    ("replayed", 403, "replayed request"),
    ("stale", 403, "stale request"),
    ("future nonce", 403, "stale request"),
    ("altered body", 403, "body does not match its signed digest"),
    ("malformed nonce", 403, "malformed nonce"),
])
def test_bad_requests_are_refused_with_one_log_line(server, case, status, why):
    body = b'{"rank": 0, "token": "payload-marker"}'
    headers, path, method = signed_headers(body), "/echo", "POST"
    if case == "unsigned":
        del headers[protocol.SIGNATURE_HEADER]
    elif case == "wrong signature":
        headers[protocol.SIGNATURE_HEADER] = "0" * 64
    elif case == "other secret":
        headers = signed_headers(body, new_secret())
    elif case == "not json":
        body = b"payload-marker \x80"
        headers = signed_headers(body)
    elif case == "json array":
        body = b'["payload-marker"]'
        headers = signed_headers(body)
    elif case == "oversized":
        headers["Content-Length"], body = str(2 << 20), b""
    elif case == "no length":
        del headers["Content-Length"]
    elif case == "unknown path":
        path, headers = "/nope", signed_headers(body, path="/nope")
    elif case == "get":
        method = "GET"
    elif case == "no nonce":
        del headers[protocol.NONCE_HEADER]
    elif case == "signed for another path":
        headers = signed_headers(body, path="/other")
    elif case == "replayed":  # the first one is accepted
        assert raw_post(server.address, path, body, headers)[0] == 200
    elif case == "stale":
        old = "%d.%s" % (time.time_ns() - int(2 * protocol.FRESHNESS * 1e9), "ab" * 12)
        headers = dict(protocol.request_headers(SECRET, path, body, nonce=old), **{"Content-Length": str(len(body))})
    elif case == "future nonce":  # a clock ahead is as stale as one behind: a captured request kept for later
        ahead = "%d.%s" % (time.time_ns() + int(2 * protocol.FRESHNESS * 1e9), "ab" * 12)
        headers = dict(protocol.request_headers(SECRET, path, body, nonce=ahead), **{"Content-Length": str(len(body))})
    elif case == "altered body":  # valid headers of a captured request, another body of the same length
        altered = b'{"rank": 9, "token": "payload-marker"}'
        assert len(altered) == len(body) and altered != body
        body = altered
    elif case == "malformed nonce":
        headers = dict(protocol.request_headers(SECRET, path, body, nonce="x"), **{"Content-Length": str(len(body))})
    got, reply, signature = raw_post(server.address, path, body, headers, method)
    assert got == status, (got, reply)
    # Refusals are signed replies too, bound to the request's path and nonce.
    assert json.loads(reply) == {"error": json.loads(reply)["error"]}
    assert protocol.verify_reply(SECRET, path, headers.get(protocol.NONCE_HEADER, ""), got, reply, signature)
    log = server.log.getvalue()
    assert log.count("\n") == 1, log
    assert log.startswith("tfringrun: elastic driver refused a request from 127.0.0.1: ") and why in log, log
    assert SECRET not in log and "payload-marker" not in log


def test_malformed_http_is_refused_with_one_log_line(server):
    host, port = server.address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /echo NOT-HTTP/1.0\r\n\r\n")
        reply = b"".join(iter(lambda: s.recv(4096), b""))
        assert reply.startswith(b"HTTP/1.1 400 "), reply
    time.sleep(0.2)
    log = server.log.getvalue()
    assert log.count("\n") == 1 and log.startswith("tfringrun: elastic driver refused a request from 127.0.0.1: ")
    assert "malformed HTTP" in log and SECRET not in log


def test_handler_errors_are_500_and_400_with_a_log_line(server):
    client = DriverClient(server.address, SECRET)
    with pytest.raises(ProtocolError, match="HTTP 500"):
        client.call("/boom", {})
    assert server.log.getvalue() == "tfringrun: elastic driver: handler /boom failed: KeyError: 'oops'\n"
    with pytest.raises(ProtocolError, match="HTTP 400.*'x' must be an integer"):
        client.call("/picky", {})
    assert server.log.getvalue().count("\n") == 2 and SECRET not in server.log.getvalue()


def test_client_refuses_a_forged_or_missing_response_signature():
    secret = new_secret()

    class Forger(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b'{"generation": 99}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            nonce = self.headers[protocol.NONCE_HEADER]
            if self.path == "/forged":
                self.send_header(protocol.SIGNATURE_HEADER, protocol.reply_signature(new_secret(), "/forged", nonce,
                                                                                     200, body))
            elif self.path == "/good":
                self.send_header(protocol.SIGNATURE_HEADER, protocol.reply_signature(secret, "/good", nonce, 200,
                                                                                     body))
            elif self.path == "/replayed":  # a reply captured from another exchange (other nonce)
                self.send_header(protocol.SIGNATURE_HEADER, protocol.reply_signature(
                    secret, "/replayed", protocol.new_nonce(), 200, body))
            elif self.path == "/body-only":  # the old scheme: the body alone signed
                self.send_header(protocol.SIGNATURE_HEADER, sign(secret, body))
            elif self.path == "/altered":  # the signature of another body (a reply changed on the way)
                self.send_header(protocol.SIGNATURE_HEADER, protocol.reply_signature(
                    secret, "/altered", nonce, 200, b'{"generation": 98}'))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forger)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = DriverClient("127.0.0.1:%d" % httpd.server_address[1], secret)
        assert client.call("/good", {}) == {"generation": 99}  # the same server, signed right: accepted
        with pytest.raises(ProtocolError, match="bad signature"):
            client.call("/forged", {})
        with pytest.raises(ProtocolError, match="unsigned"):
            client.call("/unsigned", {})
        for path in ("/replayed", "/body-only", "/altered"):
            with pytest.raises(ProtocolError, match="bad signature"):
                client.call(path, {})
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_client_errors_name_address_and_path_within_the_deadline():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ProtocolError, match=r"127\.0\.0\.1:%d \(/hosts\)" % port):
        DriverClient("127.0.0.1:%d" % port, SECRET, timeout=2).call("/hosts", {})
    with socket.socket() as silent:  # accepts connections (backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        start = time.monotonic()
        with pytest.raises(ProtocolError, match=r"\(/reset\).*deadline 0.5 s"):
            DriverClient("127.0.0.1:%d" % silent.getsockname()[1], SECRET, timeout=0.5).call("/reset", {})
        # Without the deadline the call would wait forever; 0.5 s plus a loaded 2-core machine's slack, not 60x.
        assert time.monotonic() - start < 5


def test_client_stops_reading_a_reply_over_its_cap():
    # A peer streaming an endless reply costs the client max_body bytes (plus one read), not its memory: the client
    # stops reading, closes, and says why.
    sent, total = [0], 64 << 20
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve():
        conn, _ = server.accept()
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
            while sent[0] < total:
                sent[0] += conn.send(b"x" * 65536)
        except OSError:
            pass  # the client hung up: what the test wants
        finally:
            conn.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with pytest.raises(ProtocolError, match=r"\(/hosts\): reply over 1000 bytes"):
            DriverClient("127.0.0.1:%d" % server.getsockname()[1], SECRET, timeout=10, max_body=1000).call(
                "/hosts", {})
        t.join(10)
        assert not t.is_alive() and sent[0] < total // 4, sent[0]
    finally:
        server.close()


def test_client_from_env_and_server_refuses_wildcard():
    assert client_from_env({}) is None
    client = client_from_env({"TFRING_ELASTIC_DRIVER": "10.0.0.1:4242", "TFRING_ELASTIC_SECRET": SECRET})
    assert (client.host, client.port, client.timeout) == ("10.0.0.1", 4242, 10.0)
    with pytest.raises(ProtocolError, match="TFRING_ELASTIC_SECRET is not"):
        client_from_env({"TFRING_ELASTIC_DRIVER": "10.0.0.1:4242"})
    with pytest.raises(ProtocolError, match="host:port"):
        client_from_env({"TFRING_ELASTIC_DRIVER": "nohost", "TFRING_ELASTIC_SECRET": SECRET})
    with pytest.raises(ValueError, match="every interface"):
        DriverServer("0.0.0.0", SECRET, {})


# ---- discovery
