"""The timeline: Chrome-trace JSON written by rank 0 with negotiation (each rank's ready mark), execution phases
(fusion copies, the MPI call) and cycle marks; parsed and checked."""
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
    tracks = {e["args"]["name"]: e["tid"] for e in events if e.get("ph") == "M"}
    assert {"tl_single", "tl_group_0", "tl_group_1", "tl_gather"} <= set(tracks)

    def on(track, **match):
        return [e for e in events if e.get("tid") == tracks[track] and all(e.get(k) == v for k, v in match.items())]
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
    # Every span closes: B and E balance per track.
    for name, tid in tracks.items():
        opened = sum(1 for e in events if e.get("tid") == tid and e.get("ph") == "B")
        closed = sum(1 for e in events if e.get("tid") == tid and e.get("ph") == "E")
        assert opened == closed, name


def test_timeline_from_the_environment_only_on_rank_zero():
    # TFRING_TIMELINE is read at init: re-initialize with a different path on every rank.
    path = os.path.join(tempfile.mkdtemp(prefix="tfring-tl-env-rank%d-" % R), "timeline.json")
    hvd.shutdown()
    os.environ["TFRING_TIMELINE"] = path
    try:
        hvd.init()
        hvd.allreduce(tf.ones([2]), name="tl_env")
        hvd.stop_timeline()
        hvd.barrier()
    finally:
        del os.environ["TFRING_TIMELINE"]
    written = hvd.allgather_object(os.listdir(os.path.dirname(path)))
    assert written == [["timeline.json"]] + [[]] * (N - 1), written
    if R == 0:
        with open(path) as f:
            events = json.load(f)
        assert any(e.get("args", {}).get("name") == "tl_env" for e in events if e.get("ph") == "M")
