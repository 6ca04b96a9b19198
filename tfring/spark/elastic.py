"""tfring.spark.run_elastic: an elastic tfring job on Spark tasks (Horovod's horovod.spark.run_elastic).

max_num_proc Spark tasks (not a barrier stage: they may start and end at any time) each serve a slot of an
tfring.runner.slots.elastic_job.ElasticSlotJob; the job starts on num_proc of them, shrinks when a task's process
dies (its executor lost, the task killed) and grows when Spark runs a task again (a failed task is retried under
the same index, spark.task.maxFailures) or starts one that was waiting for cores."""
import functools
import os
import threading
import uuid

from tfring.common import launch_env
from tfring.runner.slots.elastic_calls import renamed_sizes
from tfring.spark.runner import (STOP_GRACE, _driver_address, _end_jobs, _launch_args, seconds_setting,
                                 shared_docs, start_timeout_of)

WHO = "tfring.spark.run_elastic"


def _task(driver, secret, _partition):
    # Runs in the executor; a retried task registers again under its partition's index (a new process: a new slot).
    from pyspark import TaskContext
    from tfring.runner.slots.task import serve_slot
    index = TaskContext.get().partitionId()
    serve_slot(driver, secret, index)
    return [index]


def _elastic_timeout(value):
    return seconds_setting(WHO, "elastic_timeout", value, launch_env.ELASTIC_TIMEOUT)


def _sizes(sc, num_proc, min_num_proc, max_num_proc, min_np, max_np):
    min_num_proc, max_num_proc = renamed_sizes(min_num_proc, max_num_proc, min_np, max_np, stacklevel=3)
    num_proc = sc.defaultParallelism if num_proc is None else num_proc
    min_num_proc = num_proc if min_num_proc is None else min_num_proc
    max_num_proc = num_proc if max_num_proc is None else max_num_proc
    for name, value in (("num_proc", num_proc), ("min_num_proc", min_num_proc), ("max_num_proc", max_num_proc)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError("%s: %s: expected a positive integer, got %r" % (WHO, name, value))
    if not min_num_proc <= num_proc <= max_num_proc:
        raise ValueError("%s: expected min_num_proc <= num_proc <= max_num_proc, got %d, %d, %d" % (
            WHO, min_num_proc, num_proc, max_num_proc))
    return num_proc, min_num_proc, max_num_proc


@shared_docs
def run_elastic(fn, args=(), kwargs=None, num_proc=None, min_num_proc=None, max_num_proc=None, start_timeout=None,
                elastic_timeout=None, reset_limit=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
                prefix_output_with_timestamp=False, min_np=None, max_np=None):
    """Runs an elastic function (decorated by tfring.*.elastic.run inside fn) on Spark tasks as one tfring job that
    loses and gains ranks as tasks die and start (Horovod's horovod.spark.run_elastic).

    Args:
        fn: the function every rank runs (cloudpickled); it calls tfring.init() and its elastic.run function.
        args: positional arguments for fn.
        kwargs: keyword arguments for fn.
        num_proc: ranks to start with (default: the Spark context's defaultParallelism).
        min_num_proc: fewest ranks training goes on with (default num_proc); below it the job waits up to
            elastic_timeout for tasks, then fails.
        max_num_proc: most ranks (default num_proc); max_num_proc Spark tasks are submitted.
        start_timeout: seconds for num_proc tasks to start (default $TFRING_SPARK_START_TIMEOUT,
            $HOROVOD_SPARK_START_TIMEOUT or 600).
        elastic_timeout: seconds a reset may take and the wait below min_num_proc (default
            $HOROVOD_ELASTIC_TIMEOUT or 600).
        reset_limit: most resets before the job fails (default: no limit).
        {rank_args}
        min_np: deprecated name of min_num_proc (as Horovod).
        max_np: deprecated name of max_num_proc.

    Returns:
        list: the return value of each rank that finished the job, in its final rank order.

    Raises:
        ValueError: inconsistent sizes, a bad timeout.
        RankError: a rank raised an error that is not a lost peer (`.rank`: its final rank).
        LaunchError: mpirun could not be started.
        RuntimeError: no active SparkContext; mpirun ended early.
        TimeoutError: fewer than num_proc tasks started within start_timeout.
    """
    from pyspark import SparkContext
    from tfring.runner.slots.elastic_job import ElasticSlotJob
    sc = SparkContext._active_spark_context
    if sc is None:
        raise RuntimeError("%s: no active SparkContext (create a SparkSession first)" % WHO)
    num_proc, min_num_proc, max_num_proc = _sizes(sc, num_proc, min_num_proc, max_num_proc, min_np, max_np)
    timeout = start_timeout_of(start_timeout)
    ranks_env = dict(os.environ)
    ranks_env.update({k: str(v) for k, v in (env or {}).items()})
    job = ElasticSlotJob(num_proc, min_num_proc, max_num_proc, _driver_address(sc), env=ranks_env,
                         launch_args=_launch_args(None, nics, verbose, prefix_output_with_timestamp),
                         elastic_timeout=_elastic_timeout(elastic_timeout), reset_limit=reset_limit,
                         stdout=stdout, stderr=stderr, who=WHO)
    group = "tfring-spark-run-elastic-%s" % uuid.uuid4().hex
    outcome = {}
    job.start()

    def spark_job():
        try:
            sc.setJobGroup(group, "%s: up to %d ranks" % (WHO, max_num_proc), interruptOnCancel=True)
            rdd = sc.parallelize(range(max_num_proc), max_num_proc)
            outcome["indexes"] = rdd.mapPartitions(functools.partial(_task, job.address, job.secret)).collect()
        except BaseException as e:  # reported by alive()
            outcome["error"] = e

    def alive():
        # A task failing more than spark.task.maxFailures times aborts the Spark job and Spark kills every task:
        # the ranks die with them, so the Spark error is the cause to report.
        if "error" in outcome:
            raise RuntimeError("%s: the Spark job failed (a task failed more than spark.task.maxFailures times?): %s"
                               % (WHO, str(outcome["error"]).strip()[:4000]))

    thread = threading.Thread(target=spark_job, name="tfring-spark-elastic-job", daemon=True)
    thread.start()
    try:
        try:
            job.wait_ready(timeout, alive)
        except TimeoutError as e:
            raise TimeoutError("%s. Each rank runs in a Spark task; raise start_timeout (or "
                               "TFRING_SPARK_START_TIMEOUT) if executors are allocated on demand" % e) from None
        return job.call(fn, args, kwargs, alive=alive)  # its errors already say WHO
    finally:
        _end_jobs(WHO, sc, group, thread, job, STOP_GRACE)
