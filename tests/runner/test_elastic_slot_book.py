"""The elastic book over a Spark/Ray job's slots (tfring.runner.elastic.book.ElasticBook over
tfring.runner.slots.registered.RegisteredSlots) on their own: growth offers in
mpirun's host names with each spawned process's slot, restarted slots, membership from /reset, max_np; and the
job's argument checks (tfring.runner.slots.elastic_job)."""
import os
import subprocess
import sys
import threading
import time

import pytest

from tfring.common.signed_channel import BadRequest
from tfring.runner.elastic.book import ElasticBook
from tfring.runner.slots.registered import RegisteredSlots
from tfring.runner.processes import start_time
from tfring.runner.slots.elastic_job import ElasticSlotJob
from tfring.runner.slots.rank import assigned_slot


def _slot(host, address, pid):
    return {"host": host, "address": address, "seen": time.monotonic(), "dead": False, "pid": pid,
            "started": "s%d" % pid, "network": None}


def _book(max_np=None):
    lines = []
    slots = RegisteredSlots(threading.Condition(), "driver-host", lines.append)
    return slots, ElasticBook(slots, max_np, say=lines.append), lines


def test_placement_puts_the_driver_host_first_and_names_others():
    slots, book, _ = _book()
    slots.register(0, _slot("other", "a0", 10))
    slots.register(1, _slot("driver-host", "a1", 11))
    slots.register(2, _slot("other", "a2", 12))
    hosts, ranks = slots.placement([0, 1, 2])
    assert hosts == [["localhost", 1, "a1"], ["tfring-slot-host-2", 2, "a0"]]
    assert ranks == [1, 0, 2]
    assert slots.address_of("tfring-slot-host-2") == "a0" and slots.address_of("nowhere") is None
    # A relaunch puts first a host that holds the newest commit (rank 0 reads its own host's).
    hosts, ranks = slots.placement([0, 1, 2], first="other")
    assert [h[0] for h in hosts] == ["tfring-slot-host-2", "localhost"] and ranks == [0, 2, 1]


def test_growth_offers_free_live_slots_with_their_assignment():
    slots, book, _ = _book()
    for i, host in enumerate(["driver-host", "driver-host", "other", "driver-host", "other"]):
        slots.register(i, _slot(host, "a%d" % i, 100 + i))
    slots.placement([0, 4])  # the job runs on both hosts
    slots.members = {0, 4}
    reply = book.hosts({"rank": 0})
    # grouped by host in first-seen order: mpirun fills the spawn's hosts in that order
    assert reply["add"] == [["localhost", 2], ["tfring-slot-host-2", 1]]
    assign = reply["assign"]
    assert [e[0] for h in ("localhost", "tfring-slot-host-2") for e in assign[h]["slots"]] == [1, 3, 2]
    assert assign["localhost"]["slots"][0] == [1, 101, "s101"] and reply["size"] == 2
    # each host's anchor: this process (mpirun runs here) for localhost, else the slot running its daemon
    assert assign["localhost"]["anchor"][0] == os.getpid() and assign["tfring-slot-host-2"]["anchor"] == [104, "s104"]


def test_growth_is_capped_by_max_np_and_skips_silent_or_dead_slots():
    slots, book, _ = _book(max_np=3)
    for i in range(5):
        slots.register(i, _slot("driver-host", "a%d" % i, i + 1))
    slots.members = {0, 1}
    slots.slots[2]["seen"] -= 60  # silent: not offered
    slots.gone(3)
    reply = book.hosts({"rank": 0})
    assert reply["add"] == [["localhost", 1]] and reply["assign"]["localhost"]["slots"] == [[4, 5, "s5"]]


def test_a_slot_registered_again_elsewhere_replaces_the_dead_one():
    slots, book, lines = _book()
    slots.register(1, _slot("h", "a1", 5))
    slots.members = {1}
    assert slots.register(1, _slot("h", "a1", 5)) is None  # the same process again: a repeated message
    assert slots.register(1, _slot("h", "b1", 6)) == 1
    assert slots.members == set() and slots.slots[1]["pid"] == 6 and "restarted" in lines[-1]


def test_a_late_death_report_of_the_old_process_leaves_the_restarted_slot_alive():
    # CI (stop 39's run): the scheduler's retry registered before the old process's rank reported it dead; the
    # report marked the new process dead and the job never grew back.
    slots, book, lines = _book()
    slots.register(1, _slot("h", "a1", 5))
    slots.members = {1}
    old = [slots.slots[1]["pid"], slots.slots[1]["started"]]
    assert slots.register(1, _slot("h", "b1", 6)) == 1
    assert slots.gone(1, *old) is False
    assert slots.live() == [1] and not any("died" in line for line in lines)
    assert slots.gone(1, 6, slots.slots[1]["started"]) is True  # the new process's own death counts
    assert slots.live() == [] and "died" in lines[-1]


def test_reset_sets_the_members_and_checks_its_payload():
    slots, book, _ = _book()
    for i in range(3):
        slots.register(i, _slot("h", "a%d" % i, i + 1))
    slots.gone(2)
    book.reset({"hosts": ["x"], "reason": "failure", "slots": [0, 2, 7]})
    assert slots.members == {0} and len(book.reasons) == 1  # dead and unknown slots are not members
    with pytest.raises(BadRequest, match="slots"):
        book.reset({"hosts": ["x"], "slots": ["1"], "reason": "grow"})
    with pytest.raises(BadRequest, match="rank"):
        book.hosts({"rank": -1})


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_proc=0, min_np=1, max_np=None), "num_proc"),
    (dict(num_proc=2, min_np=3, max_np=None), "min_np=3 is more than num_proc=2"),
    (dict(num_proc=3, min_np=1, max_np=2), "max_np=2"),
    (dict(num_proc=1, min_np=1, max_np=None, elastic_timeout=float("nan")), "elastic_timeout"),
])
def test_bad_job_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ElasticSlotJob(bind_host="127.0.0.1", **kwargs)


def test_a_rank_finds_its_slot_by_its_hosts_anchor_and_local_rank():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        me = [os.getpid(), start_time(os.getpid())]
        assign = {"localhost": {"anchor": [1, "x"], "slots": [[0, 10, "a"]]},
                  "tfring-slot-host-1": {"anchor": me, "slots": [[3, 11, "b"], [5, 12, "c"]]}}
        assert assigned_slot(assign, 1, pid=child.pid) == [5, 12, "c"]  # this process is the child's ancestor
        assert assigned_slot(assign, 2, pid=child.pid) is None  # no such local rank
        assert assigned_slot({"localhost": assign["localhost"]}, 0, pid=child.pid) == [0, 10, "a"]  # told its host
        del assign["tfring-slot-host-1"]["anchor"]
        assert assigned_slot(assign, 0, pid=child.pid) is None  # no anchor among the ancestors
    finally:
        child.kill()
        child.wait()


def test_a_slot_on_a_host_the_job_does_not_run_on_is_not_offered():
    slots, book, lines = _book()
    slots.register(0, _slot("driver-host", "a0", 1))
    slots.register(1, _slot("new-host", "a1", 2))
    slots.placement([0])
    slots.members = {0}
    assert book.hosts({"rank": 0})["add"] == [] and book.hosts({"rank": 0})["add"] == []
    assert sum("does not run on" in line for line in lines) == 1  # said once


def test_a_host_where_no_rank_is_left_is_new_and_the_job_starts_again_for_it():
    # Its daemon forgot the job (a spawn there fails in Open MPI 5.0.11): the slot is taken by a restart, not a spawn.
    slots, book, lines = _book()
    slots.register(0, _slot("driver-host", "a0", 1))
    slots.register(1, _slot("other", "a1", 2))
    slots.placement([0, 1])
    slots.members = {0}  # the rank on "other" was lost
    asked = []
    slots.regrow = lambda fresh: asked.append(fresh) or True
    assert book.hosts({"rank": 0})["add"] == [] and asked == [[1]]
    slots.regrow = lambda fresh: False  # a job that cannot start again (reset_limit): said once, not used
    assert book.hosts({"rank": 0})["add"] == [] and sum("does not run on" in line for line in lines) == 1


def test_horovods_deprecated_size_names_warn_and_take_their_place():
    # The Spark and Ray elastic APIs both take min_np / max_np through this one function.
    from tfring.runner.slots.elastic_calls import renamed_sizes
    with pytest.warns(DeprecationWarning, match="min_np is deprecated, use min_num_proc instead"):
        assert renamed_sizes(None, None, 2, None, stacklevel=1) == (2, None)
    with pytest.warns(DeprecationWarning, match="max_np is deprecated, use max_num_proc instead"):
        assert renamed_sizes(1, 3, None, 4, stacklevel=1) == (1, 4)
    assert renamed_sizes(1, 3, None, None, stacklevel=1) == (1, 3)
