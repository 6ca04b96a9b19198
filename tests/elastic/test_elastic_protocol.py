"""The elastic ranks' channel is one protocol (tfring.common.elastic.protocol) served by one book
(tfring.runner.elastic.book.ElasticBook) over either slot source, tfringrun's discovered hosts or a Spark/Ray job's
registered slots: both take the requests the ranks build, refuse the same malformed ones with the same message,
print a rank's /log line cleaned and capped alike, and answer /hosts with the same fields. In-process, no ranks."""
import os
import subprocess
import sys
import threading
import time

import pytest

from tfring.common.elastic import protocol
from tfring.common.signed_channel import BadRequest
from tfring.runner.elastic.book import ElasticBook
from tfring.runner.elastic.discovered import DiscoveredHosts
from tfring.runner.elastic.ender import end_rank
from tfring.runner.slots.registered import RegisteredSlots


def _books():
    host_lines, slot_lines = [], []
    hosts = DiscoveredHosts(say=host_lines.append)
    hosts.set_discovered([("h1", 2)])
    hosts.set_placement([("h1", 2)], 2)
    slots = RegisteredSlots(threading.Condition(), "h1", slot_lines.append)
    return (ElasticBook(hosts, say=host_lines.append), host_lines), \
        (ElasticBook(slots, say=slot_lines.append, forward=["TFRING_ELASTIC"]), slot_lines)


def test_both_books_take_what_the_ranks_send():
    for book, _ in _books():
        reply = book.hosts(protocol.hosts_request(0))
        assert {"add", "assign", "size", "forward"} <= set(reply)  # what the rank side reads, whatever the source
        assert book.reset(protocol.reset_request(["h1"], [], "failure"))["resets"] == 1
        book.log(protocol.log_request("hello"))
        assert not book.exits.started()
        assert book.handlers()[protocol.START](protocol.start_request(1, 2)) == {"ok": True}
        assert book.exits.started() and book.exits.finished_size() is None  # started, not finished
        book.exits.record(protocol.exit_request(1, 2, 0))
        assert book.handlers()[protocol.EXIT](protocol.exit_request(0, 2, 0)) == {"ok": True}
        assert book.exits.finished_size() == 2
        book.exits.clear(2)  # the launcher's second mpirun run: a late report of the first is not counted
        assert not book.exits.started() and book.exits.finished_size() is None
        book.exits.start(protocol.start_request(0, 1, launch=1))
        book.exits.record(protocol.exit_request(0, 1, 3, launch=1))
        assert not book.exits.started() and not book.exits.reported()
        book.exits.start(protocol.start_request(0, 1, launch=2))
        book.exits.record(protocol.exit_request(0, 1, 0))  # (unnumbered: a process spawned without the number)
        assert book.exits.started() and book.exits.finished_size() == 1
        book.exits.record(protocol.exit_request(1, 2, 0))
        book.exits.record(protocol.exit_request(0, 2, 3))  # a failure: complete, not finished
        assert book.exits.complete_size() == 2 and book.exits.finished_size() is None


@pytest.mark.parametrize("path,payload,match", [
    (protocol.HOSTS, {}, "'rank' must be an integer >= 0, got None"),
    (protocol.HOSTS, {"rank": True}, "'rank' must be an integer"),
    (protocol.RESET, {"hosts": [], "slots": [], "reason": "grow"}, "'hosts' must be a non-empty list"),
    (protocol.RESET, {"hosts": ["h1"], "slots": ["0"], "reason": "grow"}, "'slots' must be a list of slot indexes"),
    (protocol.RESET, {"hosts": ["h1"], "slots": [], "reason": "bored"}, "'reason' must be 'failure' or 'grow'"),
    (protocol.LOG, {"message": 7}, "'message' must be a string"),
    (protocol.START, {"rank": 2, "size": 2}, "'rank' 2 is outside \\[0, 'size' 2\\)"),
    (protocol.START, {"rank": "0", "size": 2}, "'rank' must be an integer >= 0, got '0'"),
    (protocol.START, {"rank": 0, "size": 2, "launch": "1"}, "'launch' must be an integer >= 0, got '1'"),
    (protocol.EXIT, {"rank": 0, "size": 2, "code": 0, "launch": -1}, "'launch' must be an integer >= 0, got -1"),
    (protocol.END, {"rank": 2, "host": "-oProxyCommand=x", "pid": 9}, "'host' must be a host name"),
    (protocol.END, {"rank": 2, "host": "h 2", "pid": 9}, "'host' must be a host name"),
    (protocol.END, {"rank": 2, "host": "h2", "pid": 1}, "'pid' must be an integer >= 2, got 1"),
    (protocol.SILENT, {"rank": 0, "host": "h1", "pid": 9}, "'silent' must be a list of 1 to 4096"),
    (protocol.SILENT, {"rank": 0, "host": "h1", "pid": 9, "silent": []}, "'silent' must be a list of 1 to 4096"),
    (protocol.SILENT, {"rank": 0, "host": "h1", "pid": 9, "silent": [{"rank": 2, "host": "h2", "pid": 0}]},
     "'pid' must be an integer >= 2, got 0"),
])
def test_both_books_refuse_a_malformed_request_alike(path, payload, match):
    for book, _ in _books():
        with pytest.raises(BadRequest, match=match):
            book.handlers()[path](payload)


def test_silent_ranks_the_launcher_arbitrates_who_goes_on():
    for book, lines in _books():
        # A cut link: h1's ranks ask first and go on; h2's rank, asking later about them, is told to end.
        assert book.silent(protocol.silent_request((0, "h1", 10), [(2, "h2", 30)])) == {"ok": True, "message": ""}
        assert book.silent(protocol.silent_request((1, "h1", 11), [(2, "h2", 30)]))["ok"]
        assert sum("rank 2 (host h2, pid 30) stopped responding" in line for line in lines) == 1, lines  # once
        reply = book.silent(protocol.silent_request((2, "h2", 30), [(0, "h1", 10), (1, "h1", 11)]))
        assert reply == {"ok": False, "message": "rank 0 declared this rank silent first"}
        assert book.silent(protocol.silent_request((0, "h1", 10), [(2, "h2", 30)]))["ok"]  # h1's did not become silent
        assert not book.silent(protocol.silent_request((2, "h2", 30), [(0, "h1", 10)]))["ok"]
        book.declared.clear()  # a new mpirun run: new processes
        assert book.silent(protocol.silent_request((2, "h2", 30), [(0, "h1", 10)]))["ok"]


def test_the_survivors_went_on_only_after_a_declaration_and_a_failure_reset_since():
    # A rank allowed to go on may still fail to declare the silent rank to MPI: only the failure reset that follows
    # says the survivors went on without it (the slot job's ender then holds its machine out without a restart).
    for book, _ in _books():
        book.reset(protocol.reset_request(["h1"], [], "failure"))  # an earlier reset
        time.sleep(0.01)
        book.silent(protocol.silent_request((0, "h1", 10), [(2, "h2", 30)]))
        assert not book.recovered("h2", 30) and not book.recovered("h1", 10)
        book.reset(protocol.reset_request(["h1"], [], "grow"))
        assert not book.recovered("h2", 30)
        book.reset(protocol.reset_request(["h1"], [], "failure"))
        assert book.recovered("h2", 30) and not book.recovered("h2", 31)


def test_a_ranks_log_line_is_cleaned_and_capped_alike():
    message = "line one\nline\x1b[31m two\t" + "x" * 5000
    printed = []
    for book, lines in _books():
        book.log(protocol.log_request(message))
        printed.append(lines[-1])
    assert printed[0] == printed[1]
    assert printed[0].startswith("line one line [31m two x") and len(printed[0]) == protocol.MAX_LOG_MESSAGE
    assert all(c.isprintable() for c in printed[0])


def test_exit_reports_are_checked_alike():
    for bad in ({"rank": 2, "size": 2, "code": 0}, {"rank": 0, "size": 2}):
        for handler in (book.handlers()[protocol.EXIT] for book, _ in _books()):
            with pytest.raises(BadRequest):
                handler(bad)


def test_end_kills_only_a_process_of_this_job(tmp_path):
    # tfringrun's /end (ender.py): a rank alone on its host that stopped responding is killed where its environment
    # names this job's state directory; any other process, and any host not the job's, is refused.
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env=dict(os.environ, TFRING_ELASTIC_STATE_DIR=str(tmp_path)))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=dict(os.environ, TFRING_ELASTIC_STATE_DIR=str(tmp_path) + "x"))
    try:
        book = ElasticBook(DiscoveredHosts(say=print), say=print)
        assert book.end(protocol.end_request(1, "localhost", other.pid)) == {
            "ok": False, "message": "this launcher cannot end processes"}
        book.ender = lambda host, pid: end_rank(host, pid, str(tmp_path), known_hosts=lambda: ["h2"])
        reply = book.end(protocol.end_request(1, "localhost", other.pid))
        assert not reply["ok"] and "not ended: no process %d of this job" % other.pid in reply["message"], reply
        assert book.end(protocol.end_request(1, "h3", ours.pid)) == {
            "ok": False, "message": "refused: h3 is not one of the job's hosts"}
        assert other.poll() is None and ours.poll() is None
        assert book.end(protocol.end_request(1, "localhost", ours.pid)) == {
            "ok": True, "message": "ended (SIGKILL through this machine)"}
        assert ours.wait(timeout=10) == -9 and other.poll() is None
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()
