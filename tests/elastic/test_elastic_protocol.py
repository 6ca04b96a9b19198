"""The elastic ranks' channel is one protocol (tfring.common.elastic.protocol) on both launchers: tfringrun's HostBook
and ExitLedger and the Spark/Ray SlotBook take the requests the ranks build, refuse the same malformed ones with the
same message, and print a rank's /log line cleaned and capped alike. In-process, no ranks."""
import threading

import pytest

from tfring.common.elastic import protocol
from tfring.common.signed_channel import BadRequest
from tfring.runner.elastic.book import HostBook
from tfring.runner.elastic.exits import ExitLedger
from tfring.runner.slots.elastic_book import SlotBook


def _books():
    host_lines, slot_lines = [], []
    host = HostBook(say=host_lines.append)
    host.set_discovered([("h1", 2)])
    host.set_placement([("h1", 2)], 2)
    slot = SlotBook(threading.Condition(), "h1", None, slot_lines.append)
    return (host, host_lines), (slot, slot_lines)


def test_both_books_take_what_the_ranks_send():
    for book, _ in _books():
        assert "add" in book.hosts(protocol.hosts_request(0))
        book.reset(protocol.reset_request(["h1"], [], "failure"))
        book.log(protocol.log_request("hello"))
    ExitLedger().record(protocol.exit_request(1, 2, 0))


@pytest.mark.parametrize("path,payload,match", [
    (protocol.HOSTS, {}, "'rank' must be an integer >= 0, got None"),
    (protocol.HOSTS, {"rank": True}, "'rank' must be an integer"),
    (protocol.RESET, {"hosts": [], "slots": [], "reason": "grow"}, "'hosts' must be a non-empty list"),
    (protocol.RESET, {"hosts": ["h1"], "slots": ["0"], "reason": "grow"}, "'slots' must be a list of slot indexes"),
    (protocol.RESET, {"hosts": ["h1"], "slots": [], "reason": "bored"}, "'reason' must be 'failure' or 'grow'"),
    (protocol.LOG, {"message": 7}, "'message' must be a string"),
])
def test_both_books_refuse_a_malformed_request_alike(path, payload, match):
    for book, _ in _books():
        with pytest.raises(BadRequest, match=match):
            book.handlers()[path](payload)


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
    host_exit, slot_exit = ExitLedger().record, _books()[1][0].exit
    for bad in ({"rank": 2, "size": 2, "code": 0}, {"rank": 0, "size": 2}):
        for handler in (host_exit, slot_exit):
            with pytest.raises(BadRequest):
                handler(bad)
