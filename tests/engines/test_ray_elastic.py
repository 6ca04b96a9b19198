"""tfring.ray.ElasticRayExecutor on a local Ray cluster (127.0.0.1 only): rank 0's actor SIGKILLed mid-epoch
shrinks the job (survivors roll back to the last commit), the executor starts a new actor for the slot the
discovery still offers and the job grows back onto it; a slot added by the discovery is joined; ray_logger
values reach the callbacks; the final ranks' weights are identical. Prints the time from the kill to the next
step."""
import sys
import threading
import time

import cloudpickle
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("torch")
import elastic_digits  # noqa: E402
from conftest import local_ray  # noqa: E402
from tfring.ray import ElasticRayExecutor, ray_logger  # noqa: E402
from tfring.ray.elastic import RayHostDiscovery, TestDiscovery  # noqa: E402
from tfring.runner.slots import RankError  # noqa: E402

pytestmark = pytest.mark.slow
cloudpickle.register_pickle_by_value(elastic_digits)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster():
    with local_ray(3, env={"OMP_NUM_THREADS": "1"}):
        yield


class GrowingDiscovery(RayHostDiscovery):
    """Offers `first` slots of the cluster's node, then `then` from the moment `grow` is set."""

    def __init__(self, first, then):
        super().__init__()
        self.first, self.then, self.grow = first, then, threading.Event()

    def find_available_hosts_and_slots(self):
        hosts = super().find_available_hosts_and_slots()
        return {h: min(n, self.then if self.grow.is_set() else self.first) for h, n in hosts.items()}


def test_rank0_actor_killed_then_replaced(cluster, tmp_path):
    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=3, timeout_s=120, verbose=1)
    # env_vars reach every rank, the replacement of the killed one and the one added after it too (#44 item 13).
    executor = ElasticRayExecutor(settings, cpus_per_slot=1, env_vars={"TFRING_RAY_ELASTIC_TEST": "on"})
    executor.start()
    seen = []

    def fn():
        import os

        import tfring.torch as hvd
        out = elastic_digits.train(str(tmp_path), kill=(0, 12), min_final_size=3)
        if hvd.rank() == 0:
            ray_logger.log({"size": hvd.size(), "accuracy": out[3]})
        return tuple(out) + (os.environ.get("TFRING_RAY_ELASTIC_TEST"),)
    results = executor.run(fn, callbacks=[seen.append])
    recovery, sizes = elastic_digits.recovery(str(tmp_path))
    print("kill to next step: %.2f s; sizes: %s; resets: %s" % (recovery, sizes, executor.job.book.reasons))
    assert [r[0] for r in results] == [0, 1, 2] and all(r[1] == 3 for r in results)
    assert len({r[2] for r in results}) == 1 and results[0][3] >= 0.85
    assert [r[-1] for r in results] == ["on"] * 3, results
    assert sizes[:3] == [3, 2, 3], sizes
    assert recovery < 10.0
    assert seen == [{"size": 3, "accuracy": results[0][3]}]


def test_slot_added_by_discovery_joins(cluster, tmp_path):
    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=3, timeout_s=120)
    settings.discovery = discovery = GrowingDiscovery(2, 3)
    executor = ElasticRayExecutor(settings, override_discovery=False)
    executor.start()

    def fn():
        return elastic_digits.train(str(tmp_path), min_final_size=3, epochs=1)
    timer = threading.Timer(6.0, discovery.grow.set)
    timer.start()
    try:
        results = executor.run(fn)
    finally:
        timer.cancel()
    assert [r[1] for r in results] == [3, 3, 3] and len({r[2] for r in results}) == 1


def test_test_discovery_hides_and_shows_hosts(cluster):
    discovery = TestDiscovery(min_hosts=0, max_hosts=1, change_frequency_s=0.0, verbose=False)
    first = discovery.find_available_hosts_and_slots()
    assert first == {"127.0.0.1": 3}
    views = [discovery.find_available_hosts_and_slots() for _ in range(6)]
    assert {} in views and first in views  # one host: hidden and shown again


def test_error_in_a_rank_and_bad_settings(cluster):
    with pytest.raises(ValueError, match="max_num_proc"):
        ElasticRayExecutor.create_settings(min_num_proc=3, max_num_proc=2)
    with pytest.raises(ValueError, match="gpus_per_slot"):
        ElasticRayExecutor(ElasticRayExecutor.create_settings(), gpus_per_slot=1)
    executor = ElasticRayExecutor(ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=2))
    with pytest.raises(RuntimeError, match="start"):
        executor.run(len)
    executor.start()

    def boom():
        import tfring.torch as hvd
        hvd.init()
        time.sleep(0.5)
        if hvd.rank() == 1:
            raise ValueError("bad value on rank 1")
        return hvd.rank()
    with pytest.raises(RankError, match="bad value on rank 1") as e:
        executor.run(boom)
    assert e.value.rank == 1


class Scaled:
    def __init__(self, factor):
        import tfring.torch as hvd
        hvd.init()
        self.factor = factor


def test_ray_executor_elastic_mode(cluster):
    from tfring.ray import RayExecutor
    from tfring.ray.elastic_mode import ElasticModeExecutor
    with pytest.raises(ValueError, match="not both"):
        RayExecutor(RayExecutor.create_settings(), num_workers=2, min_workers=2)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), min_workers=2, max_workers=2)
    assert isinstance(executor, ElasticModeExecutor)
    executor.start(executable_cls=Scaled, executable_args=[10], extra_env_vars={"TFRING_RAY_ELASTIC_TEST": "100"})

    def add(x, y=0):
        import os

        import tfring.torch as hvd
        hvd.init()
        return hvd.rank() + x + y + int(os.environ.get("TFRING_RAY_ELASTIC_TEST", "0"))
    assert executor.run(add, args=[1], kwargs={"y": 2}) == [103, 104]  # extra_env_vars reached both ranks

    def scaled(obj):
        import tfring.torch as hvd
        return obj.factor * (hvd.rank() + 1)
    assert executor.execute(scaled) == [10, 20]
    with pytest.raises(NotImplementedError, match="run_remote"):
        executor.run_remote(add)
    executor.shutdown()
