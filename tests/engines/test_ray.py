"""tfring.ray.RayExecutor on a real local Ray cluster (4 CPUs, every Ray server bound to 127.0.0.1): start/run in rank
order, Keras training, state persisting across calls, execute with an executable class, errors naming the rank,
dead actors or ranks ending a call within a deadline, and shutdown leaving no process behind."""
import os
import signal
import sys
import threading
import time

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
import cloudpickle  # noqa: E402

from conftest import local_ray  # noqa: E402
from tfring.ray import RayExecutor  # noqa: E402

pytestmark = pytest.mark.slow  # real Spark/Ray clusters and ranks

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import this test file
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
RANK_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1", "TFRING_RAY_TEST": "hello"}


@pytest.fixture(scope="module")
def cluster():
    _BEFORE.update((c.laddr, c.status) for c in psutil.Process().net_connections(kind="inet"))
    with local_ray(4):
        yield


class Counter:
    """The executable: one per rank, built at start()."""

    def __init__(self, base, step=1):
        import tfring
        tfring.init()
        self.value, self.step = base + tfring.rank(), step

    def bump(self):
        self.value += self.step
        return self.value


@pytest.fixture(scope="module")
def executor(cluster):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2, cpus_per_worker=1)
    ex.start(executable_cls=Counter, executable_args=[10], executable_kwargs={"step": 5}, extra_env_vars=RANK_ENV)
    yield ex
    ex.shutdown()


def _gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _sockets(proc):
    try:
        found = proc.net_connections(kind="inet")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    if proc.pid == os.getpid():  # what this test process had before the cluster (e.g. an earlier test's MPI)
        found = [c for c in found if (c.laddr, c.status) not in _BEFORE]
    return found


# This process's sockets before Ray and tfring's services started (set by the cluster fixture).
_BEFORE = set()


def _identity():
    import os

    import tfring
    tfring.init()
    return [tfring.rank(), tfring.size(), tfring.local_rank(), tfring.local_size(), os.environ.get("TFRING_RAY_TEST"),
            os.getpid()]


def test_run_in_rank_order(executor):
    out = executor.run(_identity)
    assert [o[:5] for o in out] == [[0, 2, 0, 2, "hello"], [1, 2, 1, 2, "hello"]]
    assert [o[5] for o in out] == [i["rank_pid"] for i in executor.worker_info()]
    assert executor.run(lambda a, b=0: a * 10 + b, args=[4], kwargs={"b": 2}) == [42, 42]


def test_every_server_on_loopback(executor):
    """Ray's GCS, raylet, object manager and workers and tfring's services listen on loopback only; no process of the
    job (mpirun and the ranks included) has a connection to any other address."""
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    procs = psutil.Process().children(recursive=True) + [psutil.Process()]
    ranks = {i["rank_pid"] for i in executor.worker_info()}
    assert ranks <= {p.pid for p in procs}  # the ranks are descendants of this process (via the raylet)
    mpi = ranks | {psutil.Process(pid).ppid() for pid in ranks}
    # Open MPI's TCP listeners (PRRTE's out-of-band channel, the TCP BTL) bind the wildcard whatever the interface
    # selection; the selection (loopback here) is what they connect over, checked below.
    wild = [(p.pid, p.name(), c.laddr) for p in procs if p.pid not in mpi for c in _sockets(p)
            if c.status == psutil.CONN_LISTEN and c.laddr.ip not in LOOPBACK]
    assert not wild, "servers listening beyond loopback: %s" % wild
    out = [(p.pid, p.name(), c.raddr) for p in procs for c in _sockets(p) if c.raddr and c.raddr.ip not in LOOPBACK]
    assert not out, "connections beyond loopback: %s" % out


def _remember(token):
    import sys
    import types
    state = sys.modules.setdefault("tfring_ray_test_state", types.ModuleType("tfring_ray_test_state"))
    state.token = token
    return token


def _recall():
    import os
    import sys

    import tfring
    return sys.modules["tfring_ray_test_state"].token, tfring.is_initialized(), os.getpid()


def test_state_persists_across_runs(executor):
    assert executor.run(_remember, args=["t1"]) == ["t1", "t1"]
    pids = [i["rank_pid"] for i in executor.worker_info()]
    assert executor.run(_recall) == [("t1", True, pids[0]), ("t1", True, pids[1])]


def test_execute_uses_the_executable(executor):
    assert executor.execute(lambda c: c.bump()) == [15, 16]
    assert executor.execute(lambda c: c.bump()) == [20, 21]
    assert executor.execute_single(lambda c: (c.bump(), type(c).__name__)) == (25, "Counter")
    assert executor.execute(lambda c: c.value) == [25, 21]


def _train(epochs):
    import keras
    import tensorflow as tf
    from sklearn.datasets import load_digits

    import tfring.keras as hvd
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    keras.utils.set_random_seed(7 + hvd.rank())  # different initial weights: the broadcast must align them
    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")[hvd.rank()::hvd.size()]
    y = digits.target.astype("int64")[hvd.rank()::hvd.size()]
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=64, epochs=epochs, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    return [w.tolist() for w in model.get_weights()], history.history["loss"]


def test_keras_training_gives_identical_weights(executor):
    import numpy as np
    (w0, loss0), (w1, loss1) = executor.run(_train, args=[3])
    assert len(w0) == len(w1) == 4
    for a, b in zip(w0, w1):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-6, atol=1e-6)
    assert loss0[-1] < loss0[0] and loss1[-1] < loss1[0]


def _fail_on_rank_one():
    import tfring
    if tfring.rank() == 1:
        raise ValueError("boom from the test")
    return "ok"


def test_raising_fn_names_the_rank_and_ranks_survive(executor):
    from tfring.runner.slots import RankError
    with pytest.raises(RankError, match=r"rank 1 raised:(.|\n)*ValueError: boom from the test") as info:
        executor.run(_fail_on_rank_one)
    assert info.value.rank == 1 and isinstance(info.value, RuntimeError)
    assert executor.run(lambda: "still here") == ["still here", "still here"]


def _slow_remember(token):
    import time
    time.sleep(0.5)
    return _remember(token)


def test_run_remote_returns_refs_in_rank_order_and_keeps_the_call_order(executor):
    """Horovod's run_remote: one ObjectRef per worker; a later run() runs after it; errors reach ray.get."""
    refs = executor.run_remote(_slow_remember, args=["remote"])
    assert len(refs) == 2 and all(isinstance(r, ray.ObjectRef) for r in refs)
    assert [r[0] for r in executor.run(_recall)] == ["remote", "remote"]  # ran after the run_remote call
    assert ray.get(refs, timeout=60) == ["remote", "remote"]
    assert ray.get(executor.run_remote(lambda x: x + __import__("tfring").rank(), args=[40]), timeout=60) == [40, 41]
    with pytest.raises(ray.exceptions.RayTaskError, match=r"rank 1 raised(.|\n)*boom from the test"):
        ray.get(executor.run_remote(_fail_on_rank_one), timeout=60)
    assert ray.get(executor.run_remote(lambda: "after"), timeout=60) == ["after", "after"]


def test_run_remote_answers_more_waiting_refs_than_rays_default_concurrency(cluster):
    """1,100 refs waiting at once (Ray's async-actor default is 1,000 concurrent calls) are all answered."""
    from tfring.ray._remote import Mailbox
    box = Mailbox.remote(1100)
    refs = [box.get.remote(0, rank) for rank in range(1100)]
    box.put.remote(0, True, list(range(1100)))
    assert ray.get(refs, timeout=120) == list(range(1100))
    ray.kill(box)


def test_shutdown_leaves_no_process(executor):
    pids = executor.run(lambda: __import__("os").getpid())
    infos = executor.worker_info()
    mpirun = psutil.Process(pids[0]).ppid()
    assert pids == [i["rank_pid"] for i in infos]
    executor.shutdown()
    assert executor.workers == []
    watched = pids + [mpirun] + [i["pid"] for i in infos]
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in watched) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in watched if not _gone(p)] == []
    with pytest.raises(RuntimeError, match="not started"):
        executor.run(_identity)


def _sleep_then_allreduce():
    import time

    import numpy as np

    import tfring
    tfring.init()
    time.sleep(60)
    return float(tfring.allreduce(np.array(1.0), name="after_sleep"))


@pytest.mark.parametrize("victim", ["actor 1", "actor 0", "rank 1"])
def test_dead_worker_ends_the_call_with_a_clear_error(cluster, victim):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=2)
    ex.start(extra_env_vars=RANK_ENV)
    try:
        infos = ex.worker_info()
        what, index = victim.split()
        index = int(index)
        outcome = {}

        def call():
            try:
                outcome["value"] = ex.run(_sleep_then_allreduce)
            except Exception as e:  # the test checks the type and the message
                outcome["error"] = e
        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        time.sleep(2)  # the call is running in both ranks
        began = time.monotonic()
        if what == "actor":
            ray.kill(ex.workers[index], no_restart=True)
        else:
            os.kill(infos[index]["rank_pid"], signal.SIGKILL)
        caller.join(30)
        elapsed = time.monotonic() - began
        assert not caller.is_alive(), "run() still blocked 30 s after the %s died" % victim
        assert isinstance(outcome.get("error"), RuntimeError), outcome
        message = str(outcome["error"])
        assert ("worker %d" % index if what == "actor" else "rank %d" % index) in message, message
        assert elapsed < 20, elapsed
        print("%s: %.1f s: %s" % (victim, elapsed, message))
        ranks = [i["rank_pid"] for i in infos]
        deadline = time.monotonic() + 10
        while not all(_gone(p) for p in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p for p in ranks if not _gone(p)] == [], "ranks outlived the %s before shutdown()" % victim
        with pytest.raises(RuntimeError):
            ex.run(_identity)  # the job is over: a clear error, not a hang
    finally:
        ex.shutdown()
    watched = [p for i in infos for p in (i["pid"], i["rank_pid"])]
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in watched) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in watched if not _gone(p)] == []


def test_hosts_form_strict_spread(cluster):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_hosts=1, num_workers_per_host=2)
    ex.start(extra_env_vars=RANK_ENV)
    try:
        assert ray.util.placement_group_table(ex.placement_group)["strategy"] == "STRICT_SPREAD"
        assert ex.placement_group.bundle_specs == [{"CPU": 2}]
        assert ex.run(lambda: int(__import__("os").environ["OMPI_COMM_WORLD_RANK"])) == [0, 1]
    finally:
        ex.shutdown()


def test_use_gpu_refused_without_gpus(cluster):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=1, use_gpu=True)
    with pytest.raises(ValueError, match="no GPU"):
        ex.start()
    assert ex.workers == []


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_workers or num_hosts"):
        RayExecutor(None, num_workers=2, num_hosts=1)
    with pytest.raises(ValueError, match="use_gpu is False"):
        RayExecutor(None, num_workers=2, gpus_per_worker=1)
    with pytest.raises(ValueError, match="give num_workers"):
        RayExecutor(None)
