"""tfringrun's elastic driver without MPI ranks: the signed JSON channel over real HTTP on 127.0.0.1, discovery
parsing and polling, the host books (/hosts growth arithmetic, /reset blacklisting), the elastic flags, and the
planned mpirun command (ULFM on, the secret forwarded by name only)."""
import hashlib
import hmac
import http.client
import http.server
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from tfring.elastic import protocol
from tfring.elastic.protocol import (BadRequest, DriverClient, DriverServer, ProtocolError, client_from_env,
                                     new_secret, sign)
from tfring.runner import elastic_driver as ed
from tfring.runner.launch import main, parse, plan_elastic

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
        assert b"Error code: 400" in reply, reply
    time.sleep(0.2)
    log = server.log.getvalue()
    assert log.count("\n") == 1 and log.startswith("tfringrun: elastic driver refused a request from 127.0.0.1: ")
    assert "Bad request version" in log and SECRET not in log


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
        for path in ("/replayed", "/body-only"):
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
        assert time.monotonic() - start < 3


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

def test_parse_discovery_lines():
    text = "h1:2\n\n  h2  \nnode-3.example.com:4\nh1:2\n"
    assert ed.parse_discovery(text, 3) == [("h1", 2), ("h2", 3), ("node-3.example.com", 4)]
    assert ed.parse_discovery("", 1) == []
    for bad, words in [("h1:x", "line 1 'h1:x'"), ("h1\nh2:2:3", "line 2 'h2:2:3'"), ("h 1", "line 1 'h 1'"),
                       ("h1:-2", "line 1"), ("-h1", "line 1"), ("h1:2\nh1:3", "line 2 'h1:3': host h1 listed again")]:
        with pytest.raises(ValueError) as e:
            ed.parse_discovery(bad, 1)
        assert words in str(e.value), e.value


def script(tmp_path, body, name="discover.sh"):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_run_discovery(tmp_path):
    assert ed.run_discovery(script(tmp_path, "echo h1:2; echo h2\n"), 4) == [("h1", 2), ("h2", 4)]
    with pytest.raises(ed.DiscoveryError, match="exited with code 3: no cloud"):
        ed.run_discovery(script(tmp_path, "echo no cloud >&2; exit 3\n"))
    with pytest.raises(ed.DiscoveryError, match="line 2 'h2:x'"):
        ed.run_discovery(script(tmp_path, "echo h1; echo h2:x\n"))
    start = time.monotonic()
    with pytest.raises(ed.DiscoveryError, match="did not finish within 1 s"):
        ed.run_discovery(script(tmp_path, "sleep 30 & echo $! > %s/bg.pid; sleep 30\necho h1\n" % tmp_path),
                         timeout=1)
    assert time.monotonic() - start < 2.5  # the whole process group was killed: its pipes closed at once
    time.sleep(0.2)
    try:  # the script's background child was killed too: gone, or a zombie waiting for init to reap it
        with open("/proc/%d/stat" % int((tmp_path / "bg.pid").read_text())) as f:
            assert f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        pass


def test_poller_keeps_the_last_good_result_and_logs_each_error_once(tmp_path):
    outputs = [[("h1", 2)], ed.DiscoveryError("line 1 'bad line': expected"), ed.DiscoveryError(
        "line 1 'bad line': expected"), [("h1", 2), ("h2", 1)]]
    lines = []
    book = ed.HostBook(say=lines.append)

    def discover():
        out = outputs.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    poller = ed._Poller(discover, book, lines.append, "--host-discovery-script d.sh")
    assert poller.poll_once() and book.available == [("h1", 2)] and book.generation == 1
    assert not poller.poll_once() and not poller.poll_once()
    assert book.available == [("h1", 2)] and book.generation == 1
    assert lines == ["--host-discovery-script d.sh: line 1 'bad line': expected; this poll is ignored"]
    assert poller.poll_once() and book.available == [("h1", 2), ("h2", 1)] and book.generation == 2


# ---- the books: /hosts, /reset, /log

def book_with(discovered, np_, **kw):
    lines = []
    book = ed.HostBook(say=lines.append, **kw)
    book.set_discovered(discovered)
    book.set_placement(*ed._choose_hosts(book.available, np_, kw.get("max_np")))
    return book, lines


def test_hosts_add_is_free_slots_in_discovery_order_capped_by_max_np():
    hosts = [("h1", 2), ("h2", 2), ("h3", 1)]
    assert ed._choose_hosts(hosts, 3) == ([("h1", 2), ("h2", 2)], 3)
    assert ed._choose_hosts(hosts, 9, max_np=4) == (hosts[:2], 4) and ed._choose_hosts(hosts, 9) == (hosts, 5)
    book, _ = book_with(hosts, 3)
    assert book.occupancy == {"h1": 2, "h2": 1}
    reply = book.hosts({"rank": 0})
    assert reply["add"] == [["h2", 1], ["h3", 1]] and reply["hosts"] == [["h1", 2], ["h2", 2], ["h3", 1]]
    assert reply["size"] == 3 and reply["generation"] == 1
    assert book_with(hosts, 3, max_np=4)[0].hosts({})["add"] == [["h2", 1]]
    assert book_with(hosts, 3, max_np=3)[0].hosts({})["add"] == []
    book.set_discovered(hosts)
    assert book.generation == 1  # same hosts: same generation
    book.set_discovered(hosts + [("h4", 3)])
    assert book.generation == 2 and book.hosts({})["add"][-1] == ["h4", 3]
    with pytest.raises(BadRequest):
        book.hosts({"rank": "zero"})


def test_one_lost_process_on_a_healthy_host_is_not_blacklisted_only_its_slot_held_out():
    book, lines = book_with([("localhost", 3), ("h2", 1)], 3)
    me = socket.gethostname()  # what ranks report (PMIX_HOSTNAME): this machine's name for a localhost job
    assert book.reset({"hosts": [me, me], "reason": "failure"}) == {"ok": True, "resets": 1, "generation": 1}
    assert book.occupancy == {"localhost": 2} and book.blacklist == {}
    reply = book.hosts({})
    assert reply["hosts"] == [["localhost", 3], ["h2", 1]] and reply["add"] == [["h2", 1]]  # not the failed slot
    assert lines == ["reset 1 (failure): localhost 3 -> 2 lost ranks; 2 ranks remain"]
    book.set_discovered([("h2", 1)])  # the host leaves the discovery and comes back: whole again
    book.set_discovered([("localhost", 3), ("h2", 1)])
    assert book.hosts({})["add"] == [["localhost", 1], ["h2", 1]]


def test_host_losing_all_its_ranks_is_blacklisted_unless_discovery_dropped_it():
    book, lines = book_with([("h1", 2), ("h2", 1), ("h3", 1)], 4)
    book.reset({"hosts": ["h1", "h1", "h3"], "reason": "failure"})
    assert "h2" in book.blacklist and [h for h, _ in book.available] == ["h1", "h3"] and book.generation == 2
    assert "blacklisted host h2 (all 1 of its ranks were lost while discovery still lists it) for the rest of " \
           "the job" in lines
    book.set_discovered([("h1", 2), ("h2", 1)])  # h3 leaves the discovery, then its rank dies: not a failure
    book.reset({"hosts": ["h1", "h1"], "reason": "failure"})
    assert "h3" not in book.blacklist and book.failures["h3"] == 1


def test_host_dropping_in_two_failure_resets_in_a_row_is_blacklisted():
    book, lines = book_with([("h1", 4), ("h2", 4)], 8)
    book.reset({"hosts": ["h1"] * 3 + ["h2"] * 4, "reason": "failure"})
    book.reset({"hosts": ["h1"] * 3 + ["h2"] * 4 + ["h1"], "reason": "grow"})  # a growth keeps the streak
    assert book.blacklist == {}
    book.reset({"hosts": ["h1"] * 3 + ["h2"] * 3, "reason": "failure"})  # h2 drops for the first time
    assert list(book.blacklist) == ["h1"] and "h2" not in book.blacklist
    assert any("blacklisted host h1 (it lost ranks in 2 failure resets in a row)" in x for x in lines)
    book.reset({"hosts": ["h1"] * 3 + ["h2"] * 3, "reason": "failure"})  # h2 healthy now: streak broken
    book.reset({"hosts": ["h1"] * 3 + ["h2"] * 2, "reason": "failure"})
    assert "h2" not in book.blacklist and book.resets == 5


def test_cooldown_brings_a_blacklisted_host_and_a_held_slot_back():
    book, lines = book_with([("h1", 2), ("h2", 1)], 3, cooldown_range=(0.05, 0.1))
    book.reset({"hosts": ["h1"], "reason": "failure"})
    assert "h2" in book.blacklist and book.hosts({})["hosts"] == [["h1", 2]] and book.hosts({})["add"] == []
    assert any(x.startswith("blacklisted host h2") and "--blacklist-cooldown-range" in x for x in lines)
    generation = book.generation
    time.sleep(0.2)
    reply = book.hosts({})
    assert reply["hosts"] == [["h1", 2], ["h2", 1]] and reply["add"] == [["h1", 1], ["h2", 1]]
    assert reply["generation"] == generation + 1 and "host h2 is off the blacklist (its cooldown is over)" in lines
    forever, _ = book_with([("h1", 2), ("h2", 1)], 3)
    forever.reset({"hosts": ["h1"], "reason": "failure"})
    time.sleep(0.2)
    assert forever.hosts({})["hosts"] == [["h1", 2]] and forever.hosts({})["add"] == []


def test_reset_limit_is_logged_and_bad_payloads_refused():
    book, lines = book_with([("h1", 2)], 2, reset_limit=1)
    book.reset({"hosts": ["h1", "h1"], "reason": "grow"})
    assert not any("--reset-limit" in x for x in lines)
    assert book.reset({"hosts": ["h1", "h1"], "reason": "grow"})["resets"] == 2
    assert "reset 2 is over --reset-limit 1: the ranks end the job" in lines
    for payload in [{"hosts": [], "reason": "grow"}, {"hosts": "h1", "reason": "grow"},
                    {"hosts": [1], "reason": "grow"}, {"hosts": ["h1"], "reason": "boom"}, {"hosts": ["h1"]}]:
        with pytest.raises(BadRequest):
            book.reset(payload)


def test_canonical_host_names():
    me = socket.gethostname()
    assert ed.canonical_host(me, ["h9", "localhost"]) == "localhost"
    assert ed.canonical_host("localhost", ["h9", me]) == me
    assert ed.canonical_host("127.0.0.1", ["h9", "localhost"]) == "localhost"
    assert ed.canonical_host("h1.cluster.local", ["h1", "h2"]) == "h1"
    assert ed.canonical_host("h2", ["h1", "h2.cluster.local"]) == "h2.cluster.local"
    assert ed.canonical_host("10.0.0.7", ["10.0.0.1"]) == "10.0.0.7"  # no first-octet "short name" match
    assert ed.canonical_host("h5", ["h1", "h2"]) == "h5"


def test_log_handler_over_http_is_one_flattened_line():
    lines = []
    book = ed.HostBook(say=lines.append)
    srv = DriverServer("127.0.0.1", SECRET, book.handlers(), log=io.StringIO()).start()
    try:
        client = DriverClient(srv.address, SECRET)
        assert client.call("/log", {"message": "job below\n--min-np 2\x1b[31m"}) == {"ok": True}
        with pytest.raises(ProtocolError, match="HTTP 400"):
            client.call("/reset", {"hosts": "h1", "reason": "failure"})
    finally:
        srv.stop()
    assert lines == ["job below --min-np 2 [31m"]


def test_bind_address():
    assert ed._bind_address(["localhost", "127.0.0.1", socket.gethostname()]) == "127.0.0.1"
    ip = shutil.which("ip")
    route = subprocess.run([ip, "-j", "route", "get", "198.51.100.7"], stdout=subprocess.PIPE, text=True) \
        if ip else None
    if not route or route.returncode != 0:
        pytest.skip("no route to a remote address here")
    assert ed._bind_address(["localhost", "198.51.100.7"]) == json.loads(route.stdout)[0]["prefsrc"]


# ---- flags and the planned command

def test_elastic_flag_defaults_and_validation(tmp_path):
    args = parse(["--min-np", "2", "python", "x.py"])
    assert (args.np, args.min_num_proc, args.max_num_proc) == (2, 2, None)
    args = parse(["-np", "3", "--max-np", "5", "python", "x.py"])
    assert (args.np, args.min_num_proc, args.max_num_proc) == (3, 3, 5)
    path = script(tmp_path, "echo h1\n")
    assert parse(["--host-discovery-script", path, "-np", "1", "python", "x.py"]).host_discovery_script == path
    for argv, words in [(["--max-np", "4"], "--max-np: elastic mode needs -np or --min-np"),
                        (["--host-discovery-script", path], "--host-discovery-script: elastic mode needs"),
                        (["-np", "5", "--min-np", "1", "--max-np", "4"], "-np: 5 is above --max-np 4"),
                        (["--host-discovery-script", str(tmp_path), "-np", "1"], "is not a file")]:
        with pytest.raises(Exception) as e:
            parse(argv + ["python", "x.py"])
        assert words in str(e.value), e.value


def test_fixed_hosts_need_min_np_slots(capsys):
    with pytest.raises(SystemExit) as e:
        main(["-np", "3", "--min-np", "3", "-H", "h1:1,h2:1", "python", "x.py"])
    assert e.value.code == 2 and capsys.readouterr().err == \
        "tfringrun: --min-np: 3 is more than the 2 slots of -H\n"


def test_planned_command_has_ulfm_and_forwards_the_secret_by_name_only():
    secret = new_secret()
    args = parse(["-np", "2", "--min-np", "1", "--max-np", "3", "--reset-limit", "4", "--elastic-timeout", "30",
                  "python", "train.py", "--lr", "0.1"])
    environ = {"PATH": os.environ["PATH"], "TFRING_ELASTIC_STALE": "1", "TFRING_ELASTIC_SECRET": "old"}
    cmd, env = plan_elastic(args, [("h1", 2), ("h2", 2)], 3, "10.1.2.3:4444", secret, environ)
    assert cmd[1:3] == ["--with-ft", "ulfm"] and cmd[cmd.index("-np") + 1] == "3"
    assert cmd[cmd.index("--host") + 1] == "h1:2,h2:2"
    assert ("-x", "TFRING_ELASTIC_SECRET") in zip(cmd, cmd[1:])
    assert not any(secret in c for c in cmd) and "TFRING_ELASTIC_STALE" not in env
    assert "/bin/sh" in cmd  # remote hosts: ranks announce their start; the respawn command stays bare
    assert {k: v for k, v in env.items() if k.startswith("TFRING_ELASTIC")} == {
        "TFRING_ELASTIC": "1", "TFRING_ELASTIC_DRIVER": "10.1.2.3:4444", "TFRING_ELASTIC_SECRET": secret,
        "TFRING_ELASTIC_MIN_NP": "1", "TFRING_ELASTIC_MAX_NP": "3", "TFRING_ELASTIC_TIMEOUT": "30",
        "TFRING_ELASTIC_RESET_LIMIT": "4", "TFRING_ELASTIC_DISCOVERY": "0",
        "TFRING_ELASTIC_COMMAND": json.dumps([sys.executable, "train.py", "--lr", "0.1"])}
    for name in ["TFRING_ELASTIC", "TFRING_ELASTIC_DRIVER", "TFRING_ELASTIC_MIN_NP", "TFRING_ELASTIC_COMMAND"]:
        assert ("-x", name) in zip(cmd, cmd[1:])
    args = parse(["--min-np", "2", "python", "x.py"])
    _, env = plan_elastic(args, [("localhost", 2)], 2, "127.0.0.1:1", secret, {"HOROVOD_ELASTIC_TIMEOUT": "7"},
                          extra_env={"TFRING_ELASTIC_RESTART": "1"})
    assert env["TFRING_ELASTIC_RESTART"] == "1"
    assert (env["TFRING_ELASTIC_MAX_NP"], env["TFRING_ELASTIC_RESET_LIMIT"], env["TFRING_ELASTIC_TIMEOUT"]) == \
        ("0", "-1", "7")


# ---- the driver end to end, with a stand-in for mpirun that talks to it as rank 0 would

def test_driver_end_to_end_with_a_fake_mpirun(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_run_command(cmd, output_dir=None, stdout=None, stderr=None, env=None, **kw):
        client = client_from_env(env)
        seen["hosts"] = client.call("/hosts", {"rank": 0})
        seen["reset"] = client.call("/reset", {"hosts": ["localhost"], "reason": "failure"})
        seen["log"] = client.call("/log", {"message": "below --min-np"})
        seen["cmd"], seen["secret"], seen["address"] = cmd, env["TFRING_ELASTIC_SECRET"], env["TFRING_ELASTIC_DRIVER"]
        return 3

    monkeypatch.setattr(ed, "run_command", fake_run_command)
    disc = script(tmp_path, "echo localhost:2\n")
    err = io.StringIO()
    args = parse(["-np", "2", "--min-np", "1", "--host-discovery-script", disc, "--verbose", "python", "x.py"])
    assert ed.run_elastic(args, environ={"PATH": os.environ["PATH"]}, stderr=err) == 3
    out = capsys.readouterr().out
    assert seen["hosts"]["hosts"] == [["localhost", 2]] and seen["hosts"]["add"] == []
    assert seen["reset"]["ok"] and seen["log"] == {"ok": True}
    assert "--with-ft ulfm" in out and "TFRING_ELASTIC_SECRET" in out and seen["secret"] not in out
    assert seen["secret"] not in err.getvalue() and not any(seen["secret"] in c for c in seen["cmd"])
    assert "tfringrun: elastic: below --min-np\n" in err.getvalue()
    assert "tfringrun: elastic: blacklisted host" not in err.getvalue()  # localhost still has a rank
    with pytest.raises(ProtocolError):  # the server stopped with the job
        DriverClient(seen["address"], seen["secret"], timeout=2).call("/hosts", {})


def test_driver_gives_up_without_min_np_slots(tmp_path):
    disc = script(tmp_path, "echo h1:1\n")
    err = io.StringIO()
    args = parse(["-np", "2", "--host-discovery-script", disc, "--elastic-timeout", "1", "python", "x.py"])
    start = time.monotonic()
    assert ed.run_elastic(args, environ={}, stderr=err) == 1
    assert 1 <= time.monotonic() - start < 5
    assert err.getvalue() == "tfringrun: elastic: waiting up to 1 s (--elastic-timeout) for --min-np 2 slots\n" \
        "tfringrun: elastic: only 1 slots available after 1 s (--min-np 2)\n"
    failing = script(tmp_path, "echo nope >&2; exit 1\n", "failing.sh")
    err = io.StringIO()
    args = parse(["-np", "1", "--host-discovery-script", failing, "python", "x.py"])
    assert ed.run_elastic(args, environ={}, stderr=err) == 1
    assert err.getvalue() == "tfringrun: elastic: --host-discovery-script %s: exited with code 1: nope; the first " \
        "run must succeed (as horovodrun)\n" % failing
