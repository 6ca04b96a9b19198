"""tfring.spark.run: a function on num_proc Spark tasks as one tfring job (like horovod.spark.run).

The Spark job is a barrier stage of num_proc tasks, run from a background thread of the driver; each task is a
slot of tfring.runner.slots (its task service registers with the driver service here), so the ranks run inside
the tasks: task 0 runs mpirun, and the first task of every other host the PRRTE daemon. The job's secret reaches
the tasks in the task closure (never a command line or a log)."""
import functools
import os
import socket
import sys
import threading
import uuid

from tfring.common import knobs
from tfring.common.docstrings import fill_docs
from tfring.runner.slots import LaunchError, RankError, SlotJob

STOP_GRACE = 15.0  # seconds the tasks have to end on their own before the Spark job is cancelled

# The arguments run and run_elastic share about the ranks' environment and output, worded once (the docstring
# line "{rank_args}").
shared_docs = fill_docs({"rank_args": """env: variables for the ranks, on top of this process's environment.
stdout: where the ranks' stdout goes (default sys.stdout).
stderr: where the ranks' stderr goes (default sys.stderr).
verbose: 2 or more prints the mpirun command.
nics: network interfaces (names or CIDR subnets) for tfring's traffic between hosts.
prefix_output_with_timestamp: timestamp every line of the ranks' output."""})


def _end_jobs(who, sc, group, thread, job, grace):
    """Stops the slot job, gives the Spark job (run by `thread`) `grace` seconds to end, then cancels its job group;
    says so on stderr when even that did not end it."""
    job.stop(grace)
    thread.join(grace)
    if thread.is_alive():
        sc.cancelJobGroup(group)
        thread.join(STOP_GRACE)
    job.close()
    if thread.is_alive():
        sys.stderr.write("%s: the Spark job %s did not end after cancellation\n" % (who, group))


def _task(driver, secret, _partition):
    # Runs in the executor: one slot per partition of the barrier stage.
    from pyspark import BarrierTaskContext
    from tfring.runner.slots.task import serve_slot
    index = BarrierTaskContext.get().partitionId()
    serve_slot(driver, secret, index)
    return [index]


def seconds_setting(who, name, value, knob, environ=None):
    """A number of seconds from an argument, else the knob (its TFRING_ or HOROVOD_ variable, else its default).

    Args:
        who: what the error message starts with.
        name: the argument's name.
        value: the argument, or None.
        knob: the TFRING_* row of the knob table.
        environ: the environment (default os.environ).

    Returns:
        float: seconds.

    Raises:
        ValueError: a value that is not a positive, finite number (NaN and infinity too: every wait has a deadline).
    """
    setting, var = knobs.value(knob, environ)
    for key, v in ((name, value), (var or knob, setting)):
        if v is None or v == "":
            continue
        try:
            seconds = float(v)
        except (TypeError, ValueError):
            seconds = -1
        if not (0 < seconds < float("inf")):
            raise ValueError("%s: %s=%r: expected a positive, finite number of seconds" % (who, key, v))
        return seconds


def start_timeout_of(start_timeout, environ=None):
    """The seconds the job has for every task to start: the argument, else $TFRING_SPARK_START_TIMEOUT or
    $HOROVOD_SPARK_START_TIMEOUT, else the table's 600 (horovod.spark's default).

    Args:
        start_timeout: the run() argument, or None.
        environ: the environment (default os.environ).

    Returns:
        float: seconds.

    Raises:
        ValueError: a value that is not a positive number.
    """
    return seconds_setting("tfring.spark.run", "start_timeout", start_timeout, "TFRING_SPARK_START_TIMEOUT", environ)


def _driver_address(sc):
    # The address the executors reach the driver at (spark.driver.host), so the service listens there only.
    host = knobs.value("TFRING_SPARK_DRIVER_HOST")[0] or sc.getConf().get("spark.driver.host") or \
        os.environ.get("SPARK_LOCAL_IP") or socket.gethostname()
    address = socket.gethostbyname(host)
    if address in ("0.0.0.0", ""):
        raise ValueError("tfring.spark.run: spark.driver.host %r is not an address the executors can reach" % host)
    return address


def _launch_args(extra_mpi_args, nics, verbose, prefix_output_with_timestamp):
    args = []
    if extra_mpi_args:
        args += ["--mpi-args=" + extra_mpi_args]  # one token: a value starting with "-" is not taken for a flag
    if nics:
        # A string is already the comma-separated list; any other collection is joined (not a string's letters).
        args += ["--network-interfaces", nics if isinstance(nics, str) else ",".join(sorted(nics))]
    if prefix_output_with_timestamp:
        args += ["--prefix-output-with-timestamp"]
    if verbose and verbose >= 2:
        args += ["--verbose"]
    return args


def _ours(error):
    return str(error).replace("tfring: ", "tfring.spark.run: ", 1)


def _renamed(error):
    # The same exception types as tfring.ray (RankError with .rank, LaunchError), this API's name in the message.
    if isinstance(error, RankError):
        return RankError(error.rank, error.traceback, "tfring.spark.run")
    if isinstance(error, LaunchError):
        renamed = LaunchError(error.error)
        renamed.args = (_ours(error),)
        return renamed
    return RuntimeError(_ours(error))


@shared_docs
def run(fn, args=(), kwargs=None, num_proc=None, start_timeout=None, use_mpi=None, use_gloo=None,
        extra_mpi_args=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
        prefix_output_with_timestamp=False, executable=None):
    """Runs fn(*args, **kwargs) on num_proc Spark tasks as one tfring job; returns each rank's result in rank
    order. Needs an active SparkContext; every task must be able to run at the same time (a barrier stage).

    Args:
        fn: the function every rank runs (cloudpickled: closures and lambdas work); it calls tfring.init().
        args: positional arguments for fn.
        kwargs: keyword arguments for fn.
        num_proc: the number of ranks (default: the Spark context's defaultParallelism).
        start_timeout: seconds for every task to start and register (default $TFRING_SPARK_START_TIMEOUT,
            $HOROVOD_SPARK_START_TIMEOUT or 600).
        use_mpi: accepted (tfring always runs on MPI).
        use_gloo: must not be true: tfring is MPI-only.
        extra_mpi_args: more mpirun arguments, one string.
        {rank_args}
        executable: the ranks' Python (default: the executor's).

    Returns:
        list: the return value of each rank, rank 0 first.

    Raises:
        ValueError: use_gloo, a bad num_proc or start timeout.
        RankError: a rank raised (tfring.runner.slots.RankError, a RuntimeError: `.rank` names it, the message has
            its traceback), as from tfring.ray.RayExecutor.
        LaunchError: mpirun could not be started (e.g. unparsable extra_mpi_args), reported as soon as the first
            task tried.
        RuntimeError: no active SparkContext, a task or executor died, or the Spark job failed.
        TimeoutError: the tasks did not all start within the start timeout, or the first task did not take the
            job within 30 s of the last one starting.
    """
    if use_gloo:
        raise ValueError("tfring.spark.run: use_gloo=True: tfring runs on MPI only (Gloo is not built); "
                         "leave use_gloo unset or pass use_mpi=True")
    from pyspark import SparkContext
    sc = SparkContext._active_spark_context
    if sc is None:
        raise RuntimeError("tfring.spark.run: no active SparkContext (create a SparkSession first)")
    num_proc = sc.defaultParallelism if num_proc is None else num_proc
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError("tfring.spark.run: num_proc: expected a positive integer, got %r" % (num_proc,))
    timeout = start_timeout_of(start_timeout)
    ranks_env = dict(os.environ)
    ranks_env.update({k: str(v) for k, v in (env or {}).items()})
    job = SlotJob(num_proc, _driver_address(sc), env=ranks_env, executable=executable,
                  launch_args=_launch_args(extra_mpi_args, nics, verbose, prefix_output_with_timestamp),
                  stdout=stdout, stderr=stderr).start()
    group = "tfring-spark-run-%s" % uuid.uuid4().hex
    outcome = {}

    def spark_job():
        try:
            sc.setJobGroup(group, "tfring.spark.run: %d ranks" % num_proc, interruptOnCancel=True)
            rdd = sc.parallelize(range(num_proc), num_proc).barrier()
            outcome["indexes"] = rdd.mapPartitions(functools.partial(_task, job.address, job.secret)).collect()
        except BaseException as e:  # reported by alive() in the caller's thread
            outcome["error"] = e

    def alive():
        if "error" in outcome:
            raise RuntimeError("tfring.spark.run: the Spark job failed: %s" % str(outcome["error"]).strip()[:4000])
        if "indexes" in outcome:
            raise RuntimeError("tfring.spark.run: the Spark tasks ended before the job did")

    thread = threading.Thread(target=spark_job, name="tfring-spark-job", daemon=True)
    thread.start()
    done = False
    try:
        try:
            job.wait_ready(timeout, alive)
        except TimeoutError as e:
            if not job.ready:
                raise TimeoutError("tfring.spark.run: timed out waiting for the Spark tasks to start: %s. Each rank "
                                   "runs in a Spark task and all %d must run at once; raise start_timeout (or "
                                   "TFRING_SPARK_START_TIMEOUT) if executors are allocated on demand" % (
                                       str(e).replace("tfring: ", ""), num_proc)) from None
            raise TimeoutError(_ours(e)) from None
        except RuntimeError as e:
            raise _renamed(e) from None
        try:
            results = job.call(fn, args, kwargs, alive)
            done = True
            return results
        except RuntimeError as e:
            raise _renamed(e) from None
    finally:
        # The tasks end mpirun, the daemons and the ranks when told to stop; a failed job gets a few seconds for
        # that before the Spark job is cancelled (which kills the tasks' Python workers).
        grace = STOP_GRACE if done else 5.0 if job.launched else 0.5  # nothing to end when mpirun never ran
        _end_jobs("tfring.spark.run", sc, group, thread, job, grace)
