"""The metrics endpoint's server (tfring.common.bearer_server) in-process over loopback: only GET with the bearer
token reaches a handler; everything else is refused with its HTTP status and costs at most one log line per
interval; peers without the token holding connections open cannot keep a scraper out (the signed server's limits:
tests/common/test_signed_server_limits.py probes them in depth); the settings are checked with errors that name them."""
import io
import os
import socket
import stat
import urllib.error
import urllib.request

import pytest

from tfring.common import metrics_endpoint
from tfring.common.bearer_server import BearerServer

TOKEN = "t" * 20 + "-secret"


def _get(address, token=None, path="/metrics", method="GET"):
    headers = {"Authorization": "Bearer " + token} if token is not None else {}
    request = urllib.request.Request("http://%s%s" % (address, path), headers=headers, method=method,
                                     data=b"x" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read(), dict(reply.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


@pytest.fixture
def server():
    log, calls = io.StringIO(), []

    def metrics():
        calls.append(1)
        return "text/plain; version=0.0.4", b"tfring_size 2.0\n"
    srv = BearerServer("127.0.0.1", 0, TOKEN, {"/metrics": metrics}, log=log, max_connections=8, per_peer=4).start()
    yield srv, log, calls
    srv.stop()


def test_only_the_token_reaches_the_handler(server):
    srv, log, calls = server
    assert _get(srv.address, TOKEN)[:2] == (200, b"tfring_size 2.0\n")
    assert _get(srv.address, TOKEN, path="/metrics?x=1")[0] == 200  # a scraper's query string is ignored
    status, _, headers = _get(srv.address)
    assert status == 401 and headers.get("WWW-Authenticate") == 'Bearer realm="tfring"'
    assert _get(srv.address, TOKEN + "x")[0] == 401 and _get(srv.address, TOKEN[:-1])[0] == 401
    assert _get(srv.address, TOKEN, method="POST")[0] == 405
    assert _get(srv.address, TOKEN, path="/other")[0] == 404
    assert len(calls) == 2
    lines = log.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfring: metrics endpoint refused a request from 127.0.0.1: "
                                                   "missing or wrong bearer token"), lines  # then rate-limited


def test_idle_peers_without_the_token_cannot_keep_a_scraper_out(server):
    srv, _, calls = server
    host, port = srv.address.split(":")
    idle = [socket.create_connection((host, int(port))) for _ in range(12)]  # over the limit of 8 connections
    try:
        assert _get(srv.address, TOKEN)[0] == 200 and calls
    finally:
        for s in idle:
            s.close()


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="at least 16 characters"):
        BearerServer("127.0.0.1", 0, "short", {})
    with pytest.raises(ValueError, match="every interface"):
        BearerServer("0.0.0.0", 0, TOKEN, {})
    with pytest.raises(ValueError, match="TFRING_METRICS_PORT='70000'"):
        metrics_endpoint.port({"TFRING_METRICS_PORT": "70000"})
    with pytest.raises(ValueError, match="HOROVOD_METRICS_PORT='x'"):
        metrics_endpoint.port({"HOROVOD_METRICS_PORT": "x"})
    assert metrics_endpoint.port({}) == 0 and metrics_endpoint.port({"TFRING_METRICS_PORT": "9100"}) == 9100
    with pytest.raises(ValueError, match="TFRING_METRICS_ADDRESS=0.0.0.0"):
        metrics_endpoint.bind_address({"TFRING_METRICS_ADDRESS": "0.0.0.0"})


def test_the_token_file_is_written_once_private_and_read_back(tmp_path):
    path = tmp_path / "dir" / "token"
    token = metrics_endpoint.read_or_create_token(str(path))
    assert len(token) >= 16 and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert metrics_endpoint.read_or_create_token(str(path)) == token  # kept: a scraper's bearer_token_file
    env = {"TFRING_METRICS_TOKEN_FILE": str(path)}
    assert metrics_endpoint.token(env) == token
    assert metrics_endpoint.token(dict(env, TFRING_METRICS_TOKEN="from-the-launcher-0123456789")) == \
        "from-the-launcher-0123456789"
    path.write_text("short\n")
    with pytest.raises(ValueError, match="TFRING_METRICS_TOKEN_FILE=.*at least 16 characters"):
        metrics_endpoint.read_or_create_token(str(path))
