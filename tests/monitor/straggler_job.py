"""A small data-parallel training loop (--framework tf: DistributedGradientTape in a tf.function; torch:
DistributedOptimizer; jax: DistributedOptimizer in a jitted step) where one rank can be slowed by a sleep per step.
Run as a script, each rank prints RESULT <json>: the step at which metrics() first named a straggler (and whom),
and the last summary. The binding's rank files (ranks_*monitor.py) call `straggle` inside their shared launch."""
import argparse
import json
import time

import numpy as np


def tf_step():
    import tensorflow as tf
    import tfring.tensorflow as hvd
    tf.random.set_seed(1)
    model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    opt = tf.keras.optimizers.SGD(0.01)
    x = np.random.RandomState(hvd.rank()).rand(64, 32).astype(np.float32)
    y = np.random.RandomState(hvd.rank()).randint(0, 10, 64)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    return hvd, step


def torch_step():
    import torch
    import tfring.torch as hvd
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    x = torch.tensor(np.random.RandomState(hvd.rank()).rand(64, 32).astype(np.float32))
    y = torch.tensor(np.random.RandomState(hvd.rank()).randint(0, 10, 64))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return hvd, step


def jax_step():
    import jax
    import jax.numpy as jnp
    import optax
    import tfring.jax as hvd
    k1, k2 = jax.random.split(jax.random.PRNGKey(1))
    params = {"w1": jax.random.normal(k1, (32, 64)) * 0.1, "w2": jax.random.normal(k2, (64, 10)) * 0.1}
    tx = hvd.DistributedOptimizer(optax.sgd(0.01))
    state = {"params": params, "opt": tx.init(params)}
    x = jnp.asarray(np.random.RandomState(hvd.rank()).rand(64, 32).astype(np.float32))
    y = jnp.asarray(np.random.RandomState(hvd.rank()).randint(0, 10, 64))

    def loss(p):
        logits = jnp.maximum(x @ p["w1"], 0) @ p["w2"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def jitted(params, opt_state):
        updates, opt_state = tx.update(jax.grad(loss)(params), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def step():
        state["params"], state["opt"] = jitted(state["params"], state["opt"])
        jax.block_until_ready(state["params"])
    return hvd, step


STEPS = {"tf": tf_step, "torch": torch_step, "jax": jax_step}


def straggle(framework, slow_rank=-1, sleep=0.05, steps=40, mark=False):
    """Trains `steps` steps with `slow_rank` sleeping `sleep` s in each (tfring initialized already); returns
    {rank, named_at, named, seconds, metrics}."""
    hvd, step = STEPS[framework]()
    # No warm-up step: the first step traces/compiles the step function, which takes each rank a different time
    # (seconds on a slow 2-core machine at np=3) and is not straggling; the monitor leaves it out of the evidence.
    named_at, named = None, None
    start = time.perf_counter()
    for i in range(steps):
        if hvd.rank() == slow_rank:
            time.sleep(sleep)
        step()
        if mark:
            hvd.mark_step()
        s = hvd.straggler()
        if s is not None and named_at is None:
            named_at, named = i + 1, s
    return {"rank": hvd.rank(), "named_at": named_at, "named": named, "seconds": time.perf_counter() - start,
            "metrics": hvd.metrics()}


def scrape(token_file, path="/metrics", token=None, method="GET"):
    """Rank 0's Prometheus endpoint as a scraper sees it: (HTTP status, {(metric name, rank label or None): value}
    parsed by prometheus_client's own parser), with the bearer token read from `token_file` (or `token`)."""
    import urllib.error
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    from tfring.common import metrics_endpoint
    if token is None:
        with open(token_file) as f:
            token = f.read().strip()
    headers = {"Authorization": "Bearer " + token} if token else {}
    request = urllib.request.Request("http://%s%s" % (metrics_endpoint.address(), path), headers=headers,
                                     method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            text = reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, {}
    return 200, {(s.name, s.labels.get("rank")): s.value for f in text_string_to_metric_families(text)
                 for s in f.samples}


def steady_scrape(token_file, metrics):
    """(scraped, metrics()) from the same monitor round (a round may land between the two reads: read again)."""
    for _ in range(20):
        before = metrics()
        status, scraped = scrape(token_file)
        assert status == 200, status
        if metrics() == before:
            return scraped, before
        time.sleep(0.05)
    raise AssertionError("the monitor's rounds kept changing during 20 scrapes")


def check_totals(scraped, m, events=None):
    """The scraped counters are hvd.metrics()' `m` totals (and the elastic `events`), in base units: what stays
    the same from round to round once no collective runs."""
    assert scraped[("tfring_size", None)] == m["size"] and scraped[("tfring_steps_total", None)] == m["total_steps"]
    assert sorted(k[1] for k in scraped if k[0] == "tfring_rank_collectives_total") == \
        [str(r) for r in range(m["size"])], scraped
    for r in m["ranks"]:
        rank, t = str(r["rank"]), r["total"]
        assert scraped[("tfring_rank_collectives_total", rank)] == t["collectives"] > 0, (scraped, r)
        assert scraped[("tfring_rank_reduced_bytes_total", rank)] == t["bytes_reduced"] > 0, (scraped, r)
        assert scraped[("tfring_rank_wait_seconds_total", rank)] == t["wait_s"], (scraped, r)
        assert scraped[("tfring_rank_transfer_seconds_total", rank)] == t["transfer_s"], (scraped, r)
    for name, value in (events or {}).items():
        assert scraped[("tfring_elastic_%s_total" % name, None)] == value, (name, scraped)


def check_scrape(scraped, m, events=None):
    """The scraped values are hvd.metrics()' `m` (and the elastic `events`), in base units: the totals and the
    round's own figures."""
    check_totals(scraped, m, events)
    assert scraped[("tfring_monitor_rounds_total", None)] == m["round"]
    for r in m["ranks"]:
        rank = str(r["rank"])
        assert abs(scraped[("tfring_rank_wait_seconds_per_step", rank)] - r["wait_ms_per_step"] / 1e3) < 1e-9
        assert scraped[("tfring_rank_bus_bandwidth_gbps", rank)] == r["busbw_gbps"], (scraped, r)
    assert scraped[("tfring_straggler_rank", None)] == (m["straggler"] or {}).get("rank", -1)


def restart(hvd):
    """tfring restarted on every rank together (the files of a launch run in the same order everywhere), so the
    monitor's rounds start afresh."""
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
    hvd.shutdown()
    hvd.init()


def check_named(result, n, slow):
    """What every rank must read after straggle(slow_rank=slow, sleep=0.05, steps=30) on n ranks."""
    assert result["named_at"] is not None and result["named_at"] <= 20, result
    assert result["named"]["rank"] == slow and 25 <= result["named"]["waited_ms_per_step"] <= 80, result
    waits = [x["wait_ms_per_step"] for x in result["metrics"]["ranks"]]
    assert min(range(n), key=lambda i: waits[i]) == slow, waits


def check_one_warning(err, slow):
    """The job printed one straggler warning (on one rank), naming `slow`; `err` is this rank's stderr."""
    from mpi4py import MPI
    lines = [line for e in MPI.COMM_WORLD.allgather(err) for line in e.splitlines() if "is a straggler" in line]
    assert len(lines) == 1 and "rank %d is a straggler: the others waited" % slow in lines[0], lines


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--framework", choices=("tf", "torch", "jax"), default="tf")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--sleep", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--mark", action="store_true", help="call mark_step() after each step")
    p.add_argument("--scrape", help="rank 0 scrapes its metrics endpoint with the token in this file")
    args = p.parse_args()
    binding = __import__({"tf": "tfring.tensorflow", "torch": "tfring.torch", "jax": "tfring.jax"}[args.framework],
                         fromlist=["init"])
    binding.init()
    result = straggle(args.framework, args.slow_rank, args.sleep, args.steps, args.mark)
    if args.scrape and result["rank"] == 0:
        scraped, m = steady_scrape(args.scrape, binding.metrics)
        check_scrape(scraped, m)
        print("SCRAPE %d" % len(scraped), flush=True)
    print("RESULT " + json.dumps(result), flush=True)
