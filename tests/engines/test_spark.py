"""tfring.spark.run on real pyspark in local mode, and the slot launcher's services (tfring.runner.slots,
slot_task, slot_agent) on their own. Everything listens on and talks to 127.0.0.1 only: Spark (SPARK_LOCAL_IP,
spark.driver.host/bindAddress), the driver and task services, and Open MPI (ranks share one PRRTE host, so no
daemon is started; rank traffic is restricted to 127.0.0.1/32)."""
import base64
import http.client
import io
import json
import os
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest

pyspark = pytest.importorskip("pyspark")

from conftest import ROOT, local_spark, one_process_sgd  # noqa: E402
from tfring.common import signed_channel as protocol  # noqa: E402
from tfring.common import launch_env  # noqa: E402
from tfring.runner.processes import descendants  # noqa: E402
from tfring.runner.slots import LaunchError, RankError, SlotJob, wire  # noqa: E402
from tfring.runner.slots.exec_service import ExecService  # noqa: E402

pytestmark = pytest.mark.slow  # real Spark/Ray clusters and ranks

# The ranks cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
RANK_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
            "TF_NUM_INTEROP_THREADS": "2", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "120"}


@pytest.fixture(scope="module")
def spark():
    with local_spark(3, "tfring-test-spark") as session:
        yield session


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _environ(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _no_slot_processes_left():
    # Every process the job started (mpirun, daemons, ranks) ends with it. Only this module's processes count
    # (other jobs may run on the machine): those below this process, and orphans that inherited its environment.
    mine = ("PYTEST_CURRENT_TEST=tests/engines/test_spark.py::").encode()
    deadline = time.monotonic() + 15
    while True:
        pids = set(descendants(os.getpid())) | {int(p) for p in os.listdir("/proc") if p.isdigit()
                                                 and mine in _environ(int(p))}
        left = [(pid, _cmdline(pid)) for pid in sorted(pids - {os.getpid()})]
        left = [p for p in left if any(w in p[1] for w in ("slot_rank.py", "slot_agent.py", "prterun", "prted"))]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _train(epochs):
    # A rank's Keras training: each rank starts from different weights and its own shard; tfring broadcasts rank
    # 0's weights and averages the gradients, so every rank ends with the same model.
    import keras
    import numpy as np
    import tensorflow as tf
    import tfring.keras as hvd
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    keras.utils.set_random_seed(1000 + hvd.rank())
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=(64, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int64")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)),
                  loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=16, epochs=epochs, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    return {"rank": hvd.rank(), "size": hvd.size(), "weights": [w.tolist() for w in model.get_weights()],
            "mpi_rank": int(os.environ["OMPI_COMM_WORLD_RANK"])}


def test_keras_training_on_two_spark_tasks(spark):
    import numpy as np
    import tfring.spark
    out = io.StringIO()
    results = tfring.spark.run(_train, args=(2,), num_proc=2, env=RANK_ENV, start_timeout=120, stdout=out)
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["mpi_rank"] for r in results] == [0, 1]
    assert [r["size"] for r in results] == [2, 2]
    for a, b in zip(results[0]["weights"], results[1]["weights"]):
        np.testing.assert_array_equal(np.array(a), np.array(b))
    assert not _no_slot_processes_left()


def _whoami(tag):
    import os
    chain, pid = [], os.getpid()
    while pid > 1 and len(chain) < 8:  # the ranks run inside the Spark task's Python worker
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        chain.append(stat.split("(", 1)[1].rsplit(")", 1)[0])
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"]), tag, chain


def test_three_ranks_in_rank_order_inside_the_tasks_and_lambdas_travel(spark):
    import tfring.spark
    results = tfring.spark.run(_whoami, kwargs={"tag": (lambda: "closure")()}, num_proc=3, start_timeout=60)
    assert [r[:3] for r in results] == [(0, 3, "closure"), (1, 3, "closure"), (2, 3, "closure")]
    for _, _, _, chain in results:
        # rank -> mpirun (prterun) -> the task's Python worker -> ... -> Spark's JVM
        assert chain[1] == "prterun" and "java" in chain, chain
    again = tfring.spark.run(lambda: (lambda x: x + 1), num_proc=2, start_timeout=60)
    assert [f(1) for f in again] == [2, 2]  # results travel by value too
    assert not _no_slot_processes_left()


def _raise_on_rank_1():
    import os
    if os.environ["OMPI_COMM_WORLD_RANK"] == "1":
        raise ValueError("rank one cannot go on")
    return "fine"


def test_a_raising_rank_is_named_with_its_traceback(spark):
    import tfring.spark
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 raised") as info:
        tfring.spark.run(_raise_on_rank_1, num_proc=2, start_timeout=60)
    assert "ValueError: rank one cannot go on" in str(info.value)
    assert isinstance(info.value, RankError) and info.value.rank == 1  # as tfring.ray raises it
    assert time.monotonic() - start < 60
    assert not _no_slot_processes_left()
    assert tfring.spark.run(_whoami, args=("after",), num_proc=2, start_timeout=60)[1][:3] == (1, 2, "after")


def _kill_my_task():
    import os
    import signal
    import time
    if os.environ["OMPI_COMM_WORLD_RANK"] == "0":
        with open("/proc/%d/stat" % os.getppid()) as f:  # rank -> mpirun -> the Spark task's Python worker
            worker = int(f.read().rsplit(")", 1)[1].split()[1])
        os.kill(worker, signal.SIGKILL)
    time.sleep(600)  # a hang, unless the job ends every rank


def test_a_dying_task_is_a_clear_error_not_a_hang(spark):
    import tfring.spark
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"Spark job failed|mpirun exited"):
        tfring.spark.run(_kill_my_task, num_proc=2, start_timeout=60)
    assert time.monotonic() - start < 60
    assert not _no_slot_processes_left()


def test_a_launch_failure_is_reported_at_once(spark):
    import tfring.spark
    start = time.monotonic()
    with pytest.raises(LaunchError, match=r"tfring.spark.run: slot 0 .*could not start mpirun: .*No closing quot"):
        tfring.spark.run(_whoami, num_proc=2, start_timeout=60, extra_mpi_args="-x 'unbalanced")
    assert time.monotonic() - start < 30
    assert not _no_slot_processes_left()


def test_gloo_is_refused_and_bad_arguments_are_clear(spark):
    import tfring.spark
    with pytest.raises(ValueError, match="MPI only"):
        tfring.spark.run(_whoami, num_proc=2, use_gloo=True)
    with pytest.raises(ValueError, match="num_proc"):
        tfring.spark.run(_whoami, num_proc=0)
    from tfring.spark.runner import start_timeout_of
    assert start_timeout_of(None, {}) == 600
    assert start_timeout_of(None, {"HOROVOD_SPARK_START_TIMEOUT": "30"}) == 30
    assert start_timeout_of(None, {"TFRING_SPARK_START_TIMEOUT": "20", "HOROVOD_SPARK_START_TIMEOUT": "30"}) == 20
    assert start_timeout_of(5, {"TFRING_SPARK_START_TIMEOUT": "20"}) == 5
    with pytest.raises(ValueError, match="TFRING_SPARK_START_TIMEOUT"):
        start_timeout_of(None, {"TFRING_SPARK_START_TIMEOUT": "soon"})
    for forever in (float("inf"), float("nan"), "inf"):  # every wait has a deadline
        with pytest.raises(ValueError, match="start_timeout=.*finite"):
            start_timeout_of(forever, {})


def _post(address, path, body, headers):
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_unauthenticated_requests_are_refused_and_nothing_runs(tmp_path):
    secret, log = protocol.new_secret(), io.StringIO()
    service = ExecService("127.0.0.1", secret, log=log).start()
    job = SlotJob(2, "127.0.0.1", log=log).start()
    marker = tmp_path / "ran"
    spawn = json.dumps({"command": "touch %s" % marker}).encode()
    owner_stop = threading.Event()

    def owner():  # the slot's thread, which would start a requested command
        while not owner_stop.is_set():
            service.spawn_pending(0.1)
    thread = threading.Thread(target=owner, daemon=True)
    thread.start()
    try:
        assert service.address.startswith("127.0.0.1:") and job.address.startswith("127.0.0.1:")
        wrong = protocol.request_headers(protocol.new_secret(), "/spawn", spawn)
        for headers in ({}, wrong, {protocol.SIGNATURE_HEADER: "zz", protocol.NONCE_HEADER: protocol.new_nonce()}):
            status, _ = _post(service.address, "/spawn", spawn, headers)
            assert status == 403
        # A pickled payload for the driver that would run a command when unpickled, unsigned: refused unread.
        unpickled = tmp_path / "unpickled"

        class Evil:
            def __reduce__(self):
                return os.system, ("touch %s" % unpickled,)
        evil = json.dumps({"rank": 0, "seq": 1, "ok": True, "value": wire.encode(Evil())}).encode()
        assert _post(job.address, "/result", evil, {})[0] == 403
        assert _post(job.address, "/register", b"not json", protocol.request_headers(
            job.secret, "/register", b"not json"))[0] == 400
        bad_index = json.dumps({"index": 7, "host": "h", "address": "127.0.0.1:1"}).encode()
        assert _post(job.address, "/register", bad_index, protocol.request_headers(
            job.secret, "/register", bad_index))[0] == 400
        # A signed registration whose network would reach mpirun's arguments: refused unless an address/prefix.
        bad_network = json.dumps({"index": 0, "host": "h", "address": "127.0.0.1:1", "network": "-x EVIL"}).encode()
        assert _post(job.address, "/register", bad_network, protocol.request_headers(
            job.secret, "/register", bad_network))[0] == 400
        time.sleep(0.5)
        assert not marker.exists() and not unpickled.exists()
        # Refusals are logged one line per interval (the rest counted): the first one, named.
        assert "missing signature" in log.getvalue() and "bad signature" not in log.getvalue()
        assert secret not in log.getvalue() and job.secret not in log.getvalue()
        # The same request, signed: runs.
        signed = protocol.request_headers(secret, "/spawn", spawn)
        # Signed for another path: refused (a signature binds its path).
        assert _post(service.address, "/kill", spawn, signed)[0] == 403
        status, reply = _post(service.address, "/spawn", spawn, signed)
        assert status == 200 and "id" in json.loads(reply)
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists()
        # The same signed request again (a replay by someone who saw it): refused, nothing runs again.
        marker.unlink()
        status, reply = _post(service.address, "/spawn", spawn, signed)
        assert status == 403 and json.loads(reply)["error"] == "replayed request"  # (its log line: rate-limited)
        time.sleep(0.5)
        assert not marker.exists()
    finally:
        owner_stop.set()
        thread.join(5)
        service.stop()
        job.close()


def test_the_agent_relays_output_and_exit_code_through_a_task_service():
    secret = protocol.new_secret()
    service = ExecService("127.0.0.1", secret, log=io.StringIO()).start()
    owner_stop = threading.Event()

    def owner():
        while not owner_stop.is_set():
            service.spawn_pending(0.1)
    thread = threading.Thread(target=owner, daemon=True)
    thread.start()
    try:
        env = dict(os.environ, **{launch_env.SLOT_HOSTS: json.dumps({"tfring-slot-host-1": service.address}),
                                  launch_env.SLOT_SECRET: secret})
        agent = os.path.join(ROOT, "tfring", "runner", "slots", "agent.py")
        proc = subprocess.run([sys.executable, agent, "-x", "tfring-slot-host-1", "echo", "out;", "cat;",
                               "echo", "err", ">&2;", "exit", "3"], input=b"from stdin\n", env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        assert proc.returncode == 3, proc.stderr
        assert proc.stdout == b"out\nfrom stdin\n" and proc.stderr == b"err\n"
        unknown = subprocess.run([sys.executable, agent, "elsewhere", "true"], env=env, stderr=subprocess.PIPE,
                                 timeout=60)
        assert unknown.returncode == 255 and b"not one of this job's slots" in unknown.stderr
    finally:
        owner_stop.set()
        thread.join(5)
        service.stop()


def test_encode_decode_round_trip():
    assert wire.decode(wire.encode((len, (1,), {}))) == (len, (1,), {})
    assert base64.b64decode(wire.encode(1))  # plain base64 text


def test_more_ranks_than_the_cluster_can_run_at_once_fail_within_the_start_timeout(spark):
    # Last: Spark keeps retrying the refused barrier stage in the background after the job group is cancelled.
    import tfring.spark
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"only 0 of 4 slots started within 5 s.*all 4 must run at once"):
        tfring.spark.run(_whoami, num_proc=4, start_timeout=5)
    assert time.monotonic() - start < 30


def _train_with_commits(steps):
    # Full-batch SGD on 8 rows (4 a rank), a commit a step: a run started again with TFRING_COMMIT_DIR goes on from
    # the commit the last one left there.
    import torch

    import tfring.torch as hvd
    hvd.init()
    x = torch.arange(32, dtype=torch.float32).reshape(8, 4) / 32
    y = x.sum(1, keepdim=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, step=0)
    first = []

    @hvd.elastic.run
    def train(state):
        first.append(state.step)
        mine = slice(hvd.rank(), None, hvd.size())
        while state.step < steps:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x[mine]), y[mine]).backward()
            opt.step()
            state.step += 1
            state.commit()
    train(state)
    return first[0], state.step, [p.detach().tolist() for p in model.parameters()]


def test_a_run_started_again_with_a_commit_dir_resumes_from_its_commits(spark, tmp_path):
    # The engines' --commit-dir (#45 item 4): TFRING_COMMIT_DIR in the ranks' environment.
    torch = pytest.importorskip("torch")
    import tfring.spark
    from tfring.common.elastic import checkpoint
    env = {"TFRING_COMMIT_DIR": str(tmp_path)}
    first = tfring.spark.run(_train_with_commits, args=(4,), num_proc=2, start_timeout=60, env=env)
    assert [r[:2] for r in first] == [(0, 4), (0, 4)] and checkpoint.newest(str(tmp_path))[0] == 4
    again = tfring.spark.run(_train_with_commits, args=(10,), num_proc=2, start_timeout=60, env=env)
    assert [r[:2] for r in again] == [(4, 10), (4, 10)]  # from the commit of step 4, on both ranks
    assert again[0][2] == again[1][2]
    x = torch.arange(32, dtype=torch.float32).reshape(8, 4) / 32
    want = one_process_sgd(x, x.sum(1, keepdim=True), 10, 0.1)  # 10 steps in one go
    for got, name in zip(again[0][2], ("weight", "bias")):
        torch.testing.assert_close(torch.tensor(got), want[name], rtol=1e-5, atol=1e-6)
