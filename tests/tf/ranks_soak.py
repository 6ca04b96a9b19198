"""Soak: many random collectives (op, dtype, shape, name from a shared seed) submitted concurrently and in a
different order on every rank; every result is checked against numpy and is bitwise identical across ranks.
TFRING_SOAK_COUNT sets how many (CI: 600; the full run: 10000; at least 2 * PERIOD). The runtime's memory is
bounded (response cache <= TFRING_CACHE_CAPACITY entries, fusion buffer <= max(threshold, largest tensor), empty
queue between steps): once the sequence repeats (like training steps, period PERIOD), resident memory may not grow
by more than 64 MiB from the end of the first period to the end of the run. (Distinct eager names do grow
TensorFlow's kernel cache, ~35 KiB per name: that is TF's, and why names repeat here.)"""
import hashlib
import os
import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init, restarted

R, N = init()
COUNT = int(os.environ.get("TFRING_SOAK_COUNT", "600"))
PERIOD = 288  # a whole number of batches of 16, so every period's batches (and names) are the same
DTYPES = [tf.float32, tf.float64, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.uint8]
KINDS = ["sum", "avg", "min", "max", "allgather", "broadcast", "alltoall", "reducescatter"]
STALL = "TFRING_STALL_SHUTDOWN_TIME_SECONDS"


@pytest.fixture(scope="module", autouse=True)
def runtime():
    # A bug fails the test, never hangs it: a stall deadline unless the launch set one (tests/conftest.py sets 120 s).
    with restarted(env={STALL: os.environ.get(STALL, "60")}):
        yield


def spec(i, rng):
    kind = rng.choice(KINDS)
    dtype = rng.choice(DTYPES if kind not in ("avg",) else [tf.float32, tf.float64, tf.int32])
    rows = rng.randint(1, 4) * N
    shape = (rows,) + tuple(rng.randint(1, 5) for _ in range(rng.randint(0, 2)))
    # Names repeat, as in training steps (an eager collective's name is a kernel attr: TF caches one kernel per
    # distinct name, so unbounded names would grow TF's cache, not tfring's).
    name = "soak_%d" % (i % 97 if rng.random() < 0.5 else i % 1500)
    return dict(kind=kind, dtype=dtype, shape=shape, name=name, root=rng.randint(0, N - 1), seed=i)


def value(s, r):
    shape = s["shape"]
    if s["kind"] == "allgather":
        shape = (shape[0] + r,) + shape[1:]
    base = (np.arange(int(np.prod(shape))) * 7 + s["seed"] + 3 * r) % 5 + 1
    return base.reshape(shape).astype(np.float64)


def run_one(s):
    x = tf.cast(tf.constant(value(s, R)), s["dtype"])
    kind, name = s["kind"], s["name"]
    if kind in ("sum", "avg", "min", "max"):
        op = {"sum": hvd.Sum, "avg": hvd.Average, "min": hvd.Min, "max": hvd.Max}[kind]
        return hvd.allreduce(x, op=op, name=name)
    if kind == "allgather":
        return hvd.allgather(x, name=name)
    if kind == "broadcast":
        return hvd.broadcast(x, s["root"], name=name)
    if kind == "alltoall":
        return hvd.alltoall(x, name=name)
    return hvd.reducescatter(x, op=hvd.Sum, name=name)


def expected(s):
    vals = [value(s, r) for r in range(N)]
    kind = s["kind"]
    if kind == "sum":
        return np.sum(vals, axis=0)
    if kind == "avg":
        total = np.sum(vals, axis=0)
        return np.trunc(total / N) if s["dtype"].is_integer else total / N
    if kind == "min":
        return np.min(vals, axis=0)
    if kind == "max":
        return np.max(vals, axis=0)
    if kind == "allgather":
        return np.concatenate(vals)
    if kind == "broadcast":
        return vals[s["root"]]
    if kind == "alltoall":
        k = s["shape"][0] // N
        return np.concatenate([v[R * k:(R + 1) * k] for v in vals])
    k = s["shape"][0] // N
    return np.sum(vals, axis=0)[R * k:(R + 1) * k]


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2.0 ** 20


def test_soak_random_collectives_in_different_orders():
    # The baseline is taken after one period: a shorter run would compare the memory with itself.
    assert COUNT >= 2 * PERIOD, "TFRING_SOAK_COUNT=%d: at least %d (two periods) measure the memory" % (
        COUNT, 2 * PERIOD)
    rng = random.Random(1234)  # the same sequence on every rank
    period = [spec(i, rng) for i in range(PERIOD)]
    specs = [dict(period[i % PERIOD], seed=i) for i in range(COUNT)]  # same names/ops each period, new values
    order_rng = random.Random(R)  # ...submitted in a different order on every rank
    digest = hashlib.sha256()  # over results that are the same on every rank (not alltoall/reducescatter)
    failures = []
    batch = 16
    rss_after_warmup, measured = None, 0
    # One thread per collective of a batch: all are in flight at once, in a rank-specific order. (A smaller pool
    # would deadlock by design: each rank would block on collectives its peers have not started.)
    with ThreadPoolExecutor(batch) as pool:
        for start in range(0, COUNT, batch):
            if start == PERIOD:  # every name, dtype and shape has been seen once
                rss_after_warmup = rss_mib()
            chunk = specs[start:start + batch]
            measured += len(chunk) if start >= PERIOD else 0
            # Within a batch names must be distinct (one collective per name in flight).
            seen, chunk_unique = set(), []
            for s in chunk:
                if s["name"] in seen:
                    s = dict(s, name=s["name"] + "_dup%d" % len(seen))
                seen.add(s["name"])
                chunk_unique.append(s)
            shuffled = list(chunk_unique)
            order_rng.shuffle(shuffled)
            futures = {s["seed"]: pool.submit(run_one, s) for s in shuffled}
            for s in chunk_unique:  # check after every rank finished the batch: a failure never strands a peer
                out = futures[s["seed"]].result(timeout=120)
                got = tf.cast(out, tf.float64).numpy()
                tol = {tf.float16: 1e-3, tf.bfloat16: 1e-2}.get(s["dtype"], 0)
                if s["kind"] == "avg" and s["dtype"] == tf.float32:
                    tol = 1e-6  # x / 3 rounds differently in float32 than the float64 reference
                try:
                    np.testing.assert_allclose(got, expected(s), rtol=tol, err_msg=str(s))
                except AssertionError as e:
                    failures.append(str(e)[:2000])
                if s["kind"] not in ("alltoall", "reducescatter"):
                    digest.update(out.numpy().tobytes())
    digests = hvd.allgather_object(digest.hexdigest())
    assert not failures, "%d wrong results, first: %s" % (len(failures), failures[0])
    assert len(set(digests)) == 1, digests  # bitwise identical results on every rank
    assert rss_after_warmup is not None and measured >= PERIOD, (rss_after_warmup, measured)
    growth = rss_mib() - rss_after_warmup
    assert growth < 64, "resident memory grew %.1f MiB over %d collectives after warm-up" % (growth, measured)
