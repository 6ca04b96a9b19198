"""The elastic slot job's `/end` (tfring.runner.slots.slot_ender.SlotEnder) and the slot's side of it
(task.end_ranks), with real processes but no MPI: who may be ended, how an order travels, and what happens when the
slot that runs a machine's daemon does not answer."""
import subprocess
import sys
import threading
import time

import tfring.runner.slots.slot_ender as slot_ender
from tfring.runner.slots.registered import RegisteredSlots
from tfring.runner.slots.slot_ender import SlotEnder
from tfring.runner.slots.task import end_ranks


def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _job(relaunched):
    cond = threading.Condition()
    slots = RegisteredSlots(cond, "driver-host", lambda line: None)
    slots.register(0, {"host": "driver-host", "address": "a0", "seen": time.monotonic(), "dead": False, "pid": 1,
                       "started": "s1", "network": None})
    slots.register(1, {"host": "other", "address": "a1", "seen": time.monotonic(), "dead": False, "pid": 2,
                       "started": "s2", "network": None, "hostname": "other_machine"})  # not a plain name
    slots.placement([0, 1])  # slot 1 runs the daemon of "tfring-slot-host-2"
    return cond, slots, SlotEnder(cond, slots, lambda why: relaunched.append(why) or True)


def test_a_slot_ends_only_processes_below_it():
    child = _sleeper()
    try:
        assert end_ranks([child.pid, 1, "x"]) == [[child.pid, True], [1, False], ["x", False]]
        assert child.wait(10) == -9
        assert end_ranks(None) == [] and end_ranks([]) == []
    finally:
        child.kill()


def test_on_the_drivers_machine_the_driver_ends_its_own_descendant():
    _, _, ender = _job([])
    child = _sleeper()
    try:
        assert ender("localhost", 1) == (False, "not ended: no process 1 of this job on the driver's machine")
        assert ender("localhost", child.pid) == (True, "ended (SIGKILL by the driver)")
        assert child.wait(10) == -9
    finally:
        child.kill()


def test_an_order_travels_to_the_daemons_slot_and_back():
    cond, slots, ender = _job([])
    answers = []

    def slot():  # slot 1's status polls: the order rides on a reply, the result on the next poll
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with cond:
                pids = ender.orders_for(1)
                if pids:
                    ender.heard([[pid, pid == 4242] for pid in pids])
                    answers.append(pids)
                    return
            time.sleep(0.05)
    for host, pid, want in (("tfring-slot-host-2", 4242, (True, "ended (SIGKILL through slot 1)")),
                            ("other_machine", 4343, (False, "not ended: process 4343 is not below slot 1"))):
        threading.Thread(target=slot).start()
        assert ender(host, pid) == want  # by the job's name for the machine, or by the machine's own name
    assert answers == [[4242], [4343]]
    assert ender("nowhere", 5) == (False, "not ended: no live slot runs the Open MPI daemon of nowhere")
    assert slots.live() == [0, 1]


def test_a_daemons_slot_that_does_not_answer_leaves_its_machine_out(monkeypatch):
    monkeypatch.setattr(slot_ender, "WAIT", 0.2)
    relaunched = []
    _, slots, ender = _job(relaunched)
    ended, message = ender("tfring-slot-host-2", 4242)
    assert not ended and message == "slot 1 did not answer within 0.2 s: the job starts again without host " \
                                    "tfring-slot-host-2"
    assert relaunched == ["host tfring-slot-host-2 stopped responding (slot 1 did not answer within 0.2 s)"]
    assert slots.live() == [0] and slots.slots[1]["dead"] == "silent"  # held out until heard from again
    assert ender.orders_for(1) is None  # the order is withdrawn


def test_a_report_of_anything_but_pid_and_outcome_is_ignored():
    cond, _, ender = _job([])
    with cond:
        ender.heard([[1, True], ["2", True], [3], [4, "yes"], "junk"])
        ender.heard("junk")
    assert ender.results == {1: True}


def test_a_rank_the_survivors_went_on_without_whose_slot_does_not_answer_holds_the_machine_out(monkeypatch):
    # The survivors declared the rank failed to MPI (/silent) and shrank: they went on in place, so a machine that
    # froze or was cut off is only held out; otherwise the job still starts again without it (above).
    monkeypatch.setattr(slot_ender, "WAIT", 0.2)
    relaunched, recovered = [], {("tfring-slot-host-2", 4242)}
    cond, slots, _ = _job(relaunched)
    ender = SlotEnder(cond, slots, lambda why: relaunched.append(why) or True,
                      recovered=lambda host, pid: (host, pid) in recovered)
    ended, message = ender("tfring-slot-host-2", 4242)
    assert not ended and message == "slot 1 did not answer within 0.2 s: host tfring-slot-host-2 is held out " \
                                    "(the others went on without it)"
    assert relaunched == [] and slots.live() == [0] and slots.slots[1]["dead"] == "silent"
    assert slots.ending == {}


def test_a_machine_is_not_offered_for_growth_while_an_order_to_end_its_rank_is_out(monkeypatch):
    # Rank 0's commit right after the shrink must not take back the machine whose rank was just declared failed.
    monkeypatch.setattr(slot_ender, "WAIT", 5)
    cond, slots, ender = _job([])
    with cond:  # slot 2 on the same machine still holds a rank; slot 1 (its daemon's) is free
        slots.register(2, dict(slots.slots[1], address="a2", pid=3, started="s3"))
        slots.members = {0, 2}
    offered = []

    def slot():
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with cond:
                if ender.orders_for(1):
                    offered.append(slots.offer(float("inf"))[0])  # while the order is out
                    ender.heard([[4242, False]])
                    return
            time.sleep(0.02)
    thread = threading.Thread(target=slot)
    thread.start()
    assert ender("tfring-slot-host-2", 4242) == (False, "not ended: process 4242 is not below slot 1")
    thread.join(10)
    assert offered == [[]]
    with cond:  # answered: offered again
        assert slots.offer(float("inf"))[0] == [["tfring-slot-host-2", 1]]
