"""tfring.spark.run_elastic on real pyspark (local mode, 127.0.0.1 only): a Spark task's Python worker SIGKILLed
mid-epoch (a lost executor; rank 1's and rank 0's) shrinks the job, Spark retries the task and the job grows
back onto it; the survivors finish with identical weights. Prints the time from the kill to the next step."""
import sys

import cloudpickle
import pytest

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("torch")
from conftest import local_spark  # noqa: E402
import elastic_digits  # noqa: E402
from tfring.runner.slots import RankError  # noqa: E402
import tfring.spark  # noqa: E402

pytestmark = pytest.mark.slow
cloudpickle.register_pickle_by_value(elastic_digits)  # the ranks cannot import the tests' modules
cloudpickle.register_pickle_by_value(sys.modules[__name__])
RANK_ENV = {"OMP_NUM_THREADS": "1", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "120"}


@pytest.fixture(scope="module")
def spark():
    with local_spark(3, "tfring-test-spark-elastic", max_failures=4) as session:
        yield session


def _check(results, log_dir, size, grew_back=True):
    recovery, sizes = elastic_digits.recovery(log_dir)
    print("kill to next step: %.2f s; sizes: %s" % (recovery, sizes))
    assert len(results) == size and [r[0] for r in results] == list(range(size))
    assert all(r[1] == size for r in results)
    assert len({r[2] for r in results}) == 1, "the ranks' weights differ"
    assert len({r[4] for r in results}) == 1
    assert results[0][3] >= 0.85, results[0][3]
    assert recovery is not None and recovery < 10.0  # the goal (2 s) is reported, not timed
    assert sizes[0] >= 2 and (sizes[-1] == size if grew_back else True)
    return sizes


def test_lost_task_shrinks_then_its_retry_joins(spark, tmp_path):
    results = tfring.spark.run_elastic(elastic_digits.train, args=(str(tmp_path),),
                                       kwargs={"kill": (1, 12), "min_final_size": 3}, num_proc=3,
                                       min_num_proc=2, max_num_proc=3, env=RANK_ENV, start_timeout=120)
    sizes = _check(results, str(tmp_path), 3)
    assert sizes[:3] == [3, 2, 3], sizes


def test_rank0_task_lost_and_a_free_slot_joins(spark, tmp_path):
    # Two of three tasks start the job; the third slot joins at the first commit; rank 0's task then dies.
    results = tfring.spark.run_elastic(elastic_digits.train, args=(str(tmp_path),),
                                       kwargs={"kill": (0, 30), "min_final_size": 3}, num_proc=2,
                                       min_num_proc=1, max_num_proc=3, env=RANK_ENV, start_timeout=120)
    sizes = _check(results, str(tmp_path), 3)
    assert sizes[:4] == [2, 3, 2, 3], sizes


def test_bad_sizes_refused(spark):
    with pytest.raises(ValueError, match="min_num_proc <= num_proc <= max_num_proc"):
        tfring.spark.run_elastic(len, num_proc=3, min_num_proc=4, max_num_proc=5)
    with pytest.raises(ValueError, match="elastic_timeout"):
        tfring.spark.run_elastic(len, num_proc=1, elastic_timeout=-1)


def test_error_in_a_rank_reaches_the_caller(spark, tmp_path):
    def boom():
        import tfring.torch as hvd
        hvd.init()
        if hvd.rank() == 1:
            raise ValueError("bad input on rank 1")
        return hvd.rank()
    with pytest.raises(RankError, match="bad input on rank 1") as e:
        tfring.spark.run_elastic(boom, num_proc=2, max_num_proc=2, env=RANK_ENV, start_timeout=120)
    assert e.value.rank == 1
