"""The timeline: Chrome-trace JSON written by rank 0 with a process per rank, each with negotiation (rank 0: each
rank's ready mark), execution phases (fusion copies, the MPI call) and cycle marks; parsed and checked; clocks
aligned (a rank's spans of one collective overlap the others'); TFRING_TIMELINE_RANK0_ONLY keeps rank 0's only."""
import json
import os
import tempfile

import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init, restarted

R, N = init()


@pytest.fixture(scope="module", autouse=True)
def runtime():
    # The last test re-initializes with TFRING_TIMELINE set: the next file gets a runtime without it.
    with restarted():
        yield


def test_timeline_phases():
    # Every rank names its own file: only rank 0 may create it (tfring ignores the path on the other ranks).
    path = os.path.join(tempfile.mkdtemp(prefix="tfring-tl-rank%d-" % R), "timeline.json")
    hvd.start_timeline(path, mark_cycles=True)
    for _ in range(3):  # first through the coordinator, then the response cache
        hvd.allreduce(tf.ones([4]), name="tl_single")
    hvd.grouped_allreduce([tf.ones([2]), tf.ones([3])], name="tl_group")  # fused: copies in/out
    hvd.allgather(tf.ones([R + 1]), name="tl_gather")
    written_while_running = os.listdir(os.path.dirname(path))
    hvd.stop_timeline()
    hvd.barrier()
    written = hvd.allgather_object((written_while_running, os.listdir(os.path.dirname(path))))
    assert written[0] == (["timeline.json"], ["timeline.json"]), written
    for r in range(1, N):  # checked on every rank, for every non-zero rank
        assert written[r] == ([], []), "rank %d wrote a timeline: %s" % (r, written)
    if R != 0:
        return
    with open(path) as f:
        events = json.load(f)  # a complete JSON array
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert procs == {r: "rank %d" % r for r in range(N)}, procs
    by_rank = {r: {e["args"]["name"]: e["tid"] for e in events if e.get("name") == "thread_name" and e["pid"] == r}
               for r in range(N)}
    for r in range(N):
        assert {"tl_single", "tl_group_0", "tl_group_1", "tl_gather"} <= set(by_rank[r]), (r, by_rank[r])

    def on(track, rank=0, **match):
        tid = by_rank[rank][track]
        return [e for e in events if e.get("pid") == rank and e.get("tid") == tid
                and all(e.get(k) == v for k, v in match.items())]
    for r in range(1, N):  # every rank's own phases, and its spans line up with rank 0's (aligned clocks)
        assert len(on("tl_single", r, name="NEGOTIATE_allreduce", ph="B")) == 3
        assert on("tl_group_0", r, name="MPI_ALLREDUCE", ph="B") and on("tl_gather", r, name="EXECUTE", ph="B")
        mine = [e["ts"] for e in on("tl_gather", r, ph="B", name="EXECUTE") + on("tl_gather", r, ph="E")]
        zero = [e["ts"] for e in on("tl_gather", 0, ph="B", name="EXECUTE") + on("tl_gather", 0, ph="E")]
        assert min(mine) <= max(zero) + 5000 and min(zero) <= max(mine) + 5000, (r, mine, zero)
    assert len(on("tl_single", name="NEGOTIATE_allreduce", ph="B")) == 3
    paths = [e["args"]["path"] for e in on("tl_single", ph="E") if "path" in e.get("args", {})]
    assert paths[0] == "coordinator" and "response cache" in paths[1:]
    ready = {e["args"]["rank"] for e in on("tl_single", ph="i")}
    assert ready == set(range(N))  # each rank's ready mark from the coordinator round
    assert on("tl_single", name="MPI_ALLREDUCE", ph="B")
    for phase in ("MEMCPY_IN_FUSION_BUFFER", "MPI_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"):
        assert on("tl_group_0", name=phase, ph="B") and on("tl_group_1", name=phase, ph="B"), phase
    assert on("tl_gather", name="EXECUTE", ph="B")
    assert any(e.get("name") == "CYCLE_START" for e in events)
    # Every span closes: B and E balance per track, on every rank.
    for r in range(N):
        for name, tid in by_rank[r].items():
            opened = sum(1 for e in events if e.get("pid") == r and e.get("tid") == tid and e.get("ph") == "B")
            closed = sum(1 for e in events if e.get("pid") == r and e.get("tid") == tid and e.get("ph") == "E")
            assert opened == closed, (r, name)


@pytest.mark.parametrize("rank0_only", [False, True])
def test_timeline_from_the_environment_only_on_rank_zero(rank0_only):
    # TFRING_TIMELINE is read at init: re-initialize with a different path on every rank.
    path = os.path.join(tempfile.mkdtemp(prefix="tfring-tl-env-rank%d-" % R), "timeline.json")
    hvd.shutdown()
    os.environ["TFRING_TIMELINE"] = path
    os.environ["TFRING_TIMELINE_RANK0_ONLY"] = "1" if rank0_only else "0"
    try:
        hvd.init()
        hvd.allreduce(tf.ones([2]), name="tl_env")
        hvd.stop_timeline()
        hvd.barrier()
    finally:
        del os.environ["TFRING_TIMELINE"], os.environ["TFRING_TIMELINE_RANK0_ONLY"]
    written = hvd.allgather_object(os.listdir(os.path.dirname(path)))
    assert written == [["timeline.json"]] + [[]] * (N - 1), written
    if R == 0:
        with open(path) as f:
            events = json.load(f)
        with_track = {e["pid"] for e in events if e.get("ph") == "M" and e.get("args", {}).get("name") == "tl_env"}
        assert with_track == ({0} if rank0_only else set(range(N))), with_track
