"""Each documented TFRING_* knob changes what the runtime does (issue #18 item 10): the runtime reads them at init(),
so every test restarts it with its own environment on every rank and checks an observable effect (timeline file
contents, fusion visible in the timeline, negotiation paths, latency, stall behaviour, log lines)."""
import contextlib
import json
import os
import threading
import time

import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import all_ranks_here, init

R, N = init()


# The harness's deadline for stalled collectives (tests/conftest.py) stays: it only turns a bug into a failure.
KEEP = ("TFRING_STALL_SHUTDOWN_TIME_SECONDS",)


@contextlib.contextmanager
def runtime(**knobs):
    """The runtime restarted with these TFRING_* variables and no others (but KEEP); the default one afterwards."""
    saved = {k: v for k, v in os.environ.items() if k.startswith(("TFRING_", "HOROVOD_"))}
    all_ranks_here()  # one rank's shutdown ends what the others still run (the previous file's last collectives)
    hvd.shutdown()
    for k in saved:
        if k not in KEEP:
            del os.environ[k]
    os.environ.update({k: str(v) for k, v in knobs.items()})
    try:
        hvd.init()
        yield
    finally:
        hvd.shutdown()  # also closes the timeline file
        for k in knobs:
            os.environ.pop(k, None)
        os.environ.update(saved)
        hvd.init()


def on_rank_0(check, *args):
    """Runs check(*args) on rank 0 (it reads rank 0's timeline); every rank then passes or fails alike, so no rank
    goes on into the next test's init() while another has left."""
    error = None
    if R == 0:
        try:
            check(*args)
        except Exception as e:  # noqa: BLE001 - reported on every rank
            error = "rank 0: %s: %s" % (type(e).__name__, e)
    error = hvd.broadcast_object(error, 0)
    assert error is None, error


def load_timeline(path):
    with open(path) as f:
        events = json.load(f)  # a complete JSON array once the runtime is shut down
    events = [e for e in events if e.get("pid") == 0]  # rank 0's process (every rank has one)
    tracks = {e["args"]["name"]: e["tid"] for e in events if e.get("name") == "thread_name"}
    return events, tracks


def concurrent_allreduces(count, late_rank=None):
    """count named 16-float allreduces in flight at once on every rank; late_rank submits 0.3 s after the others,
    so the others' requests are all waiting when its arrive (its first may go alone, the rest share a cycle). The
    inputs and threads are ready before the threads submit together: on a busy machine, starting them one by one
    spread the late rank's requests over several cycles."""
    results = [None] * count
    inputs = [tf.fill([16], float(R + k)) for k in range(count)]
    go = threading.Barrier(count + 1)

    def one(k):
        go.wait()
        results[k] = hvd.allreduce(inputs[k], op=hvd.Sum, name="fuse_%d" % k)
    threads = [threading.Thread(target=one, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    if R == late_rank:
        time.sleep(0.3)
    go.wait()
    for t in threads:
        t.join(timeout=120)
    for k in range(count):
        assert results[k] is not None and results[k].numpy().tolist() == [float(sum(range(N)) + N * k)] * 16


def test_timeline_variables_rank_0_writes_the_file_with_or_without_cycle_marks(tmp_path):
    for mark in ("1", "0"):
        path = os.path.join(str(tmp_path), "timeline_rank%d_mark%s.json" % (R, mark))  # each rank names its own
        with runtime(TFRING_TIMELINE=path, TFRING_TIMELINE_MARK_CYCLES=mark):
            for _ in range(2):
                hvd.allreduce(tf.ones([3]), name="tl_env")
            hvd.barrier()
        written = hvd.allgather_object(os.path.exists(path))
        assert written == [True] + [False] * (N - 1)  # only rank 0 writes a timeline
        on_rank_0(check_timeline, path, mark == "1")


def check_timeline(path, marked):
    events, tracks = load_timeline(path)
    assert "tl_env" in tracks
    assert [e["name"] for e in events if e.get("tid") == tracks["tl_env"] and e.get("ph") == "B"].count(
        "NEGOTIATE_allreduce") == 2
    cycles = [e for e in events if e.get("name") == "CYCLE_START"]
    assert (len(cycles) > 0) == marked, len(cycles)


def test_cache_capacity_zero_negotiates_every_time_through_the_coordinator(tmp_path):
    path = os.path.join(str(tmp_path), "cache_rank%d.json" % R)
    for capacity, cached in ((0, False), (1024, True)):
        with runtime(TFRING_CACHE_CAPACITY=capacity, TFRING_TIMELINE=path):
            for step in range(4):
                out = hvd.allreduce(tf.fill([5], float(R + step)), op=hvd.Sum, name="cache_knob")
                assert out.numpy().tolist() == [float(sum(range(N)) + N * step)] * 5  # same results either way
            hvd.barrier()
        on_rank_0(check_negotiation_paths, path, cached)


def check_negotiation_paths(path, cached):
    events, tracks = load_timeline(path)
    paths = [e["args"]["path"] for e in events
             if e.get("tid") == tracks["cache_knob"] and e.get("ph") == "E" and "path" in e.get("args", {})]
    assert len(paths) == 4 and paths[0] == "coordinator", paths
    assert ("response cache" in paths) == cached, paths


def fused_groups(path):
    """Sizes of the fusion-buffer groups of the fuse_* tensors (one MEMCPY_IN span start shared by a group)."""
    events, tracks = load_timeline(path)
    mine = {tid for name, tid in tracks.items() if name.startswith("fuse_")}
    starts = {}
    for e in events:
        if e.get("tid") in mine and e.get("name") == "MEMCPY_IN_FUSION_BUFFER" and e.get("ph") == "B":
            starts.setdefault(e["ts"], []).append(e["tid"])
    return sorted(len(v) for v in starts.values())


@pytest.mark.parametrize("threshold,check", [
    ("0", lambda groups: groups == []),  # 0 = no fusion: every tensor its own MPI call
    ("130", lambda groups: groups and max(groups) == 2),  # two 64-byte tensors fit in 130 bytes, three do not
    (None, lambda groups: groups and max(groups) >= 3),  # the default 8 MiB takes every waiting tensor
])
def test_fusion_threshold_bounds_what_shares_one_mpi_call(tmp_path, threshold, check):
    path = os.path.join(str(tmp_path), "fusion_rank%d.json" % R)
    # 1 s cycles: after the late rank's first request (which may start a cycle alone), its others wait for the
    # next cycle one cycle time later. 100 ms let a loaded machine spread 6 submissions over 3 cycles ([2, 2, 2]).
    knobs = dict(TFRING_TIMELINE=path, TFRING_CYCLE_TIME=1000)
    if threshold is not None:
        knobs["TFRING_FUSION_THRESHOLD"] = threshold
    with runtime(**knobs):
        concurrent_allreduces(6, late_rank=0)
        hvd.barrier()
    def check_groups():
        groups = fused_groups(path)
        assert check(groups), (threshold, groups)
    on_rank_0(check_groups)


def rank_1_waits_2_seconds(tmp_path, cycle_ms):
    """The other ranks wait 2 s in "window_end" for rank 0; returns the path of rank 0's timeline."""
    path = os.path.join(str(tmp_path), "cycles_%s_rank%d.json" % (cycle_ms, R))
    with runtime(TFRING_CYCLE_TIME=cycle_ms, TFRING_TIMELINE=path, TFRING_TIMELINE_MARK_CYCLES=1):
        assert hvd.tunables()[1] == float(cycle_ms)
        hvd.allreduce(tf.ones([1]), name="window_start")
        if R == 0:
            time.sleep(2.0)
        hvd.allreduce(tf.ones([1]), name="window_end")
    return path


def cycle_marks_in_window(path):
    events, tracks = load_timeline(path)
    start = max(e["ts"] for e in events if e.get("tid") == tracks["window_start"] and "ts" in e)
    end = min(e["ts"] for e in events if e.get("tid") == tracks["window_end"] and e.get("ph") == "B")
    return sum(1 for e in events if e.get("name") == "CYCLE_START" and start < e["ts"] < end)


def test_cycle_time_spaces_the_cycles_of_waiting_collectives(tmp_path):
    slow = rank_1_waits_2_seconds(tmp_path, 400)
    fast = rank_1_waits_2_seconds(tmp_path, 1)

    def check_counts():
        # 400 ms apart: at most 2 s / 0.4 s + 2 cycles. At 1 ms the waiting ranks' cycles are paced by rank 0's
        # idle wake-up (every 100 ms): ~20, only compared, loosely.
        counts = cycle_marks_in_window(slow), cycle_marks_in_window(fast)
        assert counts[0] <= 7 and counts[1] > counts[0] + 3, "cycle marks in 2 s at 400 ms and 1 ms: %s" % (counts,)
    on_rank_0(check_counts)


def test_stall_check_disable_means_no_warning_and_no_deadline(capfd):
    with runtime(TFRING_STALL_CHECK_DISABLE=1, TFRING_STALL_CHECK_TIME_SECONDS=1,
                 TFRING_STALL_SHUTDOWN_TIME_SECONDS=2):
        if R != 0:
            time.sleep(3.5)  # past both times: enabled, rank 0 would warn, then fail with DeadlineExceededError
        out = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="stall_disabled")
        assert out.numpy()[0] == N
    err = capfd.readouterr().err
    assert "stall" not in err, err


def test_every_rank_uses_rank_0s_fusion_threshold():
    # Fusion decides how many MPI calls a cycle makes: ranks with different environments must still agree.
    with runtime(TFRING_FUSION_THRESHOLD=(1 + R) << 20):
        hvd.allreduce(tf.ones([2]), name="first_after_init")  # the first cycle ships rank 0's settings
        tunables = hvd.tunables()
        assert tunables[0] == 1 << 20, tunables
        assert hvd.allgather_object(tunables) == [tunables] * N


def test_log_level_debug_logs_the_settings_in_force(capfd):
    with runtime(TFRING_LOG_LEVEL="debug", TFRING_FUSION_THRESHOLD=12345, TFRING_CYCLE_TIME=3):
        hvd.allreduce(tf.ones([1]), name="log_knob")
    err = capfd.readouterr().err
    assert "[tfring DEBUG rank %d] initialized: size %d, fusion 12345 B, cycle 3 ms" % (R, N) in err, err
    with runtime():
        hvd.allreduce(tf.ones([1]), name="log_knob")
    assert "DEBUG" not in capfd.readouterr().err  # the default level is warning
