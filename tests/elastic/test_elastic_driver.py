"""tfringrun's elastic driver without MPI ranks (its signed channel: tests/common/test_signed_channel.py): discovery
parsing and polling, the elastic book over discovered hosts (/hosts growth arithmetic, /reset blacklisting), the
elastic flags, and the planned mpirun command (ULFM on, the secret forwarded by name only)."""
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from tfring.common.signed_channel import BadRequest, DriverClient, ProtocolError, client_from_env, new_secret
from tfring.common.signed_server import DriverServer
from tfring.runner.elastic.book import ElasticBook
from tfring.runner.elastic.discovered import DiscoveredHosts, choose_hosts
from tfring.runner.elastic import discovery, hostnames
from tfring.runner.elastic import driver as ed
from tfring.runner.launch import main, parse
from tfring.runner.flags import UsageError
from tfring.runner.mpirun import plan_elastic

SECRET = new_secret()


def test_parse_discovery_lines():
    text = "h1:2\n\n  h2  \nnode-3.example.com:4\nh1:2\n"
    assert discovery.parse_discovery(text, 3) == [("h1", 2), ("h2", 3), ("node-3.example.com", 4)]
    assert discovery.parse_discovery("", 1) == []
    for bad, words in [("h1:x", "line 1 'h1:x'"), ("h1\nh2:2:3", "line 2 'h2:2:3'"), ("h 1", "line 1 'h 1'"),
                       ("h1:-2", "line 1"), ("-h1", "line 1"), ("h1:2\nh1:3", "line 2 'h1:3': host h1 listed again")]:
        with pytest.raises(ValueError) as e:
            discovery.parse_discovery(bad, 1)
        assert words in str(e.value), e.value


def script(tmp_path, body, name="discover.sh"):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_run_discovery(tmp_path):
    assert discovery.run_discovery(script(tmp_path, "echo h1:2; echo h2\n"), 4) == [("h1", 2), ("h2", 4)]
    with pytest.raises(discovery.DiscoveryError, match="exited with code 3: no cloud"):
        discovery.run_discovery(script(tmp_path, "echo no cloud >&2; exit 3\n"))
    with pytest.raises(discovery.DiscoveryError, match="line 2 'h2:x'"):
        discovery.run_discovery(script(tmp_path, "echo h1; echo h2:x\n"))
    start = time.monotonic()
    with pytest.raises(discovery.DiscoveryError, match="did not finish within 1 s"):
        discovery.run_discovery(script(tmp_path, "sleep 30 & echo $! > %s/bg.pid; sleep 30\necho h1\n" % tmp_path),
                         timeout=1)
    # The whole process group was killed: its pipes closed at once, not when the background `sleep 30` ends (the
    # wait this guards against; the bound leaves a loaded 2-core machine room).
    assert time.monotonic() - start < 20
    time.sleep(0.2)
    try:  # the script's background child was killed too: gone, or a zombie waiting for init to reap it
        with open("/proc/%d/stat" % int((tmp_path / "bg.pid").read_text())) as f:
            assert f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        pass


def test_poller_keeps_the_last_good_result_and_logs_each_error_once(tmp_path):
    outputs = [[("h1", 2)], discovery.DiscoveryError("line 1 'bad line': expected"), discovery.DiscoveryError(
        "line 1 'bad line': expected"), [("h1", 2), ("h2", 1)]]
    lines = []
    book = DiscoveredHosts(say=lines.append)

    def discover():
        out = outputs.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    poller = discovery.Poller(discover, book, lines.append, "--host-discovery-script d.sh")
    assert poller.poll_once() and book.available == [("h1", 2)] and book.generation == 1
    assert not poller.poll_once() and not poller.poll_once()
    assert book.available == [("h1", 2)] and book.generation == 1
    assert lines == ["--host-discovery-script d.sh: line 1 'bad line': expected; this poll is ignored"]
    assert poller.poll_once() and book.available == [("h1", 2), ("h2", 1)] and book.generation == 2


# ---- the books: /hosts, /reset, /log

def book_with(discovered, np_, max_np=None, reset_limit=None, cooldown_range=None):
    lines = []
    hosts = DiscoveredHosts(cooldown_range, lines.append)
    hosts.set_discovered(discovered)
    hosts.set_placement(*choose_hosts(hosts.available, np_, max_np))
    return ElasticBook(hosts, max_np, reset_limit, lines.append), lines


def test_hosts_add_is_free_slots_in_discovery_order_capped_by_max_np():
    hosts = [("h1", 2), ("h2", 2), ("h3", 1)]
    assert choose_hosts(hosts, 3) == ([("h1", 2), ("h2", 2)], 3)
    assert choose_hosts(hosts, 9, max_np=4) == (hosts[:2], 4)
    assert choose_hosts(hosts, 9) == (hosts, 5)
    book, _ = book_with(hosts, 3)
    assert book.source.occupancy == {"h1": 2, "h2": 1}
    reply = book.hosts({"rank": 0})
    assert reply["add"] == [["h2", 1], ["h3", 1]] and reply["hosts"] == [["h1", 2], ["h2", 2], ["h3", 1]]
    assert reply["size"] == 3 and reply["generation"] == 1
    assert book_with(hosts, 3, max_np=4)[0].hosts({"rank": 0})["add"] == [["h2", 1]]
    assert book_with(hosts, 3, max_np=3)[0].hosts({"rank": 0})["add"] == []
    book.source.set_discovered(hosts)
    assert book.source.generation == 1  # same hosts: same generation
    book.source.set_discovered(hosts + [("h4", 3)])
    assert book.source.generation == 2 and book.hosts({"rank": 0})["add"][-1] == ["h4", 3]
    with pytest.raises(BadRequest):
        book.hosts({"rank": "zero"})


def test_one_lost_process_on_a_healthy_host_is_not_blacklisted_only_its_slot_held_out():
    book, lines = book_with([("localhost", 3), ("h2", 1)], 3)
    me = socket.gethostname()  # what ranks report (PMIX_HOSTNAME): this machine's name for a localhost job
    assert book.reset({"hosts": [me, me], "reason": "failure"}) == {"ok": True, "resets": 1}
    assert book.source.occupancy == {"localhost": 2} and book.source.blacklist == {}
    reply = book.hosts({"rank": 0})
    assert reply["hosts"] == [["localhost", 3], ["h2", 1]] and reply["add"] == [["h2", 1]]  # not the failed slot
    assert lines == ["reset 1 (failure): localhost 3 -> 2 lost ranks; 2 ranks remain"]
    book.source.set_discovered([("h2", 1)])  # the host leaves the discovery and comes back: whole again
    book.source.set_discovered([("localhost", 3), ("h2", 1)])
    assert book.hosts({"rank": 0})["add"] == [["localhost", 1], ["h2", 1]]


def test_host_losing_all_its_ranks_is_blacklisted_unless_discovery_dropped_it():
    book, lines = book_with([("h1", 2), ("h2", 1), ("h3", 1)], 4)
    book.reset({"hosts": ["h1", "h1", "h3"], "reason": "failure"})
    hosts = book.source
    assert "h2" in hosts.blacklist and [h for h, _ in hosts.available] == ["h1", "h3"] and hosts.generation == 2
    assert "blacklisted host h2 (all 1 of its ranks were lost while discovery still lists it) for the rest of " \
           "the job" in lines
    book.source.set_discovered([("h1", 2), ("h2", 1)])  # h3 leaves the discovery, then its rank dies: not a failure
    book.reset({"hosts": ["h1", "h1"], "reason": "failure"})
    assert "h3" not in book.source.blacklist and book.source.failures["h3"] == 1


def test_host_dropping_in_two_failure_resets_in_a_row_is_blacklisted():
    book, lines = book_with([("h1", 4), ("h2", 4)], 8)
    book.reset({"hosts": ["h1"] * 3 + ["h2"] * 4, "reason": "failure"})
    book.reset({"hosts": ["h1"] * 3 + ["h2"] * 4 + ["h1"], "reason": "grow"})  # a growth keeps the streak
    assert book.source.blacklist == {}
    book.reset({"hosts": ["h1"] * 3 + ["h2"] * 3, "reason": "failure"})  # h2 drops for the first time
    assert list(book.source.blacklist) == ["h1"] and "h2" not in book.source.blacklist
    assert any("blacklisted host h1 (it lost ranks in 2 failure resets in a row)" in x for x in lines)
    book.reset({"hosts": ["h1"] * 3 + ["h2"] * 3, "reason": "failure"})  # h2 healthy now: streak broken
    book.reset({"hosts": ["h1"] * 3 + ["h2"] * 2, "reason": "failure"})
    assert "h2" not in book.source.blacklist and book.resets == 5


def test_cooldown_brings_a_blacklisted_host_and_a_held_slot_back():
    book, lines = book_with([("h1", 2), ("h2", 1)], 3, cooldown_range=(0.05, 0.1))
    book.reset({"hosts": ["h1"], "reason": "failure"})
    reply = book.hosts({"rank": 0})
    assert "h2" in book.source.blacklist and reply["hosts"] == [["h1", 2]] and reply["add"] == []
    assert any(x.startswith("blacklisted host h2") and "--blacklist-cooldown-range" in x for x in lines)
    generation = book.source.generation
    time.sleep(0.2)
    reply = book.hosts({"rank": 0})
    assert reply["hosts"] == [["h1", 2], ["h2", 1]] and reply["add"] == [["h1", 1], ["h2", 1]]
    assert reply["generation"] == generation + 1 and "host h2 is off the blacklist (its cooldown is over)" in lines
    forever, _ = book_with([("h1", 2), ("h2", 1)], 3)
    forever.reset({"hosts": ["h1"], "reason": "failure"})
    time.sleep(0.2)
    assert forever.hosts({"rank": 0})["hosts"] == [["h1", 2]] and forever.hosts({"rank": 0})["add"] == []


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
    assert hostnames.canonical_host(me, ["h9", "localhost"]) == "localhost"
    assert hostnames.canonical_host("localhost", ["h9", me]) == me
    assert hostnames.canonical_host("127.0.0.1", ["h9", "localhost"]) == "localhost"
    assert hostnames.canonical_host("h1.cluster.local", ["h1", "h2"]) == "h1"
    assert hostnames.canonical_host("h2", ["h1", "h2.cluster.local"]) == "h2.cluster.local"
    assert hostnames.canonical_host("10.0.0.7", ["10.0.0.1"]) == "10.0.0.7"  # no first-octet "short name" match
    assert hostnames.canonical_host("h5", ["h1", "h2"]) == "h5"


def test_log_handler_over_http_is_one_flattened_line():
    lines = []
    book = ElasticBook(DiscoveredHosts(), say=lines.append)
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
    assert hostnames.bind_address(["localhost", "127.0.0.1", socket.gethostname()]) == "127.0.0.1"
    ip = shutil.which("ip")
    route = subprocess.run([ip, "-j", "route", "get", "198.51.100.7"], stdout=subprocess.PIPE, text=True) \
        if ip else None
    if not route or route.returncode != 0:
        pytest.skip("no route to a remote address here")
    assert hostnames.bind_address(["localhost", "198.51.100.7"]) == json.loads(route.stdout)[0]["prefsrc"]


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
    # Only the collective components Open MPI's ULFM settings list as tested with failures (not han or adapt)
    assert cmd[3:6] == ["--mca", "coll", "^hcoll,portals4,han,adapt"]
    assert cmd[cmd.index("--host") + 1] == "h1:2,h2:2"
    mine = parse(["-np", "2", "--min-np", "1", "--mpi-args=--mca coll ^hcoll", "python", "train.py"])
    chosen, _ = plan_elastic(mine, [("h1", 2)], 2, "10.1.2.3:4444", secret, environ)
    assert chosen[1:3] == ["--with-ft", "ulfm"] and chosen.count("coll") == 1  # the user's choice stands
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


@pytest.mark.parametrize("environ,keepalive", [
    ({}, True),  # the default deadline (30 min): PRRTE's keepalive notices a lost host first, the job restarts
    ({"TFRING_STALL_SHUTDOWN_TIME_SECONDS": "5"}, False),  # in place at the deadline: nothing may end the job
    ({"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "60"}, False),
    ({"TFRING_STALL_SHUTDOWN_TIME_SECONDS": "61"}, True),
    ({"TFRING_STALL_SHUTDOWN_TIME_SECONDS": "5", "TFRING_STALL_CHECK_DISABLE": "1"}, True),
    ({"TFRING_STALL_SHUTDOWN_TIME_SECONDS": "0"}, True),
])
def test_a_short_stall_deadline_drops_prrtes_keepalive(environ, keepalive):
    args = parse(["-np", "2", "--min-np", "1", "python", "x.py"])
    cmd, _ = plan_elastic(args, [("h1", 1), ("h2", 1)], 2, "10.1.2.3:4444", new_secret(), environ)
    assert ("oob_tcp_keepalive_time" in cmd) == keepalive and ("oob_tcp_keepalive_probes" in cmd) == keepalive
    assert cmd[1:3] == ["--with-ft", "ulfm"] and cmd[cmd.index("--host") + 1] == "h1:1,h2:1"
    with pytest.raises(UsageError, match="TFRING_STALL_SHUTDOWN_TIME_SECONDS='soon': expected seconds"):
        plan_elastic(args, [("h1", 1), ("h2", 1)], 2, "10.1.2.3:4444", new_secret(),
                     {"TFRING_STALL_SHUTDOWN_TIME_SECONDS": "soon"})


@pytest.mark.parametrize("stall,keepalive", [(None, True), ("5", False), ("61", True)])
def test_a_slot_jobs_mpirun_drops_the_keepalive_alike(stall, keepalive):
    # Spark's and Ray's elastic jobs (slot 0's launcher): the same rule as tfringrun's.
    from tfring.runner.slots.launcher import mpirun_command
    env = {k: v for k, v in os.environ.items() if "STALL" not in k}
    env.update({"TFRING_STALL_SHUTDOWN_TIME_SECONDS": stall} if stall else {})
    spec = {"np": 2, "hosts": [["localhost", 1, "10.1.2.3:1"], ["h2", 1, "10.1.2.4:1"]], "start_timeout": 30,
            "env": env, "ulfm": True}
    cmd, _, _ = mpirun_command(DriverClient("10.1.2.3:4444", new_secret()), spec, new_secret())
    assert ("oob_tcp_keepalive_time" in cmd) == keepalive and ("oob_tcp_keepalive_probes" in cmd) == keepalive
    assert "ulfm" in cmd


# ---- the driver end to end, with a stand-in for mpirun that talks to it as rank 0 would

def test_driver_end_to_end_with_a_fake_mpirun(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_run_command(cmd, output_dir=None, stdout=None, stderr=None, env=None, **kw):
        client = client_from_env(env)
        seen["hosts"] = client.call("/hosts", {"rank": 0})
        seen["reset"] = client.call("/reset", {"hosts": ["localhost"], "reason": "failure"})
        seen["log"] = client.call("/log", {"message": "below --min-np"})
        client.call("/exit", {"rank": 0, "size": 1, "code": 3})  # the rank's own failure: not restarted
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


@pytest.mark.parametrize("reports,want", [
    ([], 0),  # ranks that never start tfring's elastic runtime (nothing reported): mpirun's status stands
    ([("/start", 0), ("/start", 1)], 1),  # started, then all ended inside MPI (ULFM's mpirun exits 0): not finished
    ([("/start", 0), ("/start", 1), ("/exit", 0)], 0),  # rank 1's report lost (or os._exit): mpirun's status
    ([("/start", 0), ("/start", 1), ("/exit", 0), ("/exit", 1)], 0),
])
def test_ranks_that_started_and_never_reported_their_exit_fail_a_job_mpirun_called_a_success(
        tmp_path, monkeypatch, reports, want):
    def fake_run_command(cmd, output_dir=None, stdout=None, stderr=None, env=None, **kw):
        client = client_from_env(env)
        for path, rank in reports:
            client.call(path, dict({"rank": rank, "size": 2}, **({"code": 0} if path == "/exit" else {})))
        return 0

    monkeypatch.setattr(ed, "run_command", fake_run_command)
    err = io.StringIO()
    args = parse(["-np", "2", "--min-np", "1", "--host-discovery-script", script(tmp_path, "echo localhost:2\n"),
                  "python", "x.py"])
    assert ed.run_elastic(args, environ={"PATH": os.environ["PATH"]}, stderr=err) == want
    assert ("no rank reported its exit" in err.getvalue()) == bool(want), err.getvalue()


def test_driver_gives_up_without_min_np_slots(tmp_path):
    disc = script(tmp_path, "echo h1:1\n")
    err = io.StringIO()
    args = parse(["-np", "2", "--host-discovery-script", disc, "--elastic-timeout", "1", "python", "x.py"])
    start = time.monotonic()
    assert ed.run_elastic(args, environ={}, stderr=err) == 1
    # It waited the 1 s asked for, not the default 600 s (the bound leaves a loaded machine room).
    assert 1 <= time.monotonic() - start < 60
    assert err.getvalue() == "tfringrun: elastic: waiting up to 1 s (--elastic-timeout) for --min-np 2 slots\n" \
        "tfringrun: elastic: only 1 slots available after 1 s (--min-np 2)\n"
    failing = script(tmp_path, "echo nope >&2; exit 1\n", "failing.sh")
    err = io.StringIO()
    args = parse(["-np", "1", "--host-discovery-script", failing, "python", "x.py"])
    assert ed.run_elastic(args, environ={}, stderr=err) == 1
    assert err.getvalue() == "tfringrun: elastic: --host-discovery-script %s: exited with code 1: nope; the first " \
        "run must succeed (as horovodrun)\n" % failing
