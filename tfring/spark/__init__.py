"""tfring on Apache Spark: `tfring.spark.run(fn, num_proc=...)` runs a function on Spark tasks as one tfring job
(like horovod.spark.run). pyspark is imported only when run() is called."""


def run(fn, args=(), kwargs=None, num_proc=None, start_timeout=None, use_mpi=None, use_gloo=None,
        extra_mpi_args=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
        prefix_output_with_timestamp=False, executable=None):
    """Runs fn(*args, **kwargs) on num_proc Spark tasks as one tfring job; returns each rank's result in rank
    order (see tfring.spark.runner.run for the details).

    Args:
        fn: the function every rank runs (it calls tfring.init()).
        args: positional arguments for fn.
        kwargs: keyword arguments for fn.
        num_proc: the number of ranks (default: the Spark context's defaultParallelism).
        start_timeout: seconds for every task to start (default $TFRING_SPARK_START_TIMEOUT,
            $HOROVOD_SPARK_START_TIMEOUT or 600).
        use_mpi: accepted (tfring always runs on MPI).
        use_gloo: must not be true: tfring is MPI-only.
        extra_mpi_args: more mpirun arguments, one string.
        env: variables for the ranks, on top of this process's environment.
        stdout: where the ranks' stdout goes (default sys.stdout).
        stderr: where the ranks' stderr goes (default sys.stderr).
        verbose: 2 or more prints the mpirun command.
        nics: network interfaces for tfring's traffic between hosts.
        prefix_output_with_timestamp: timestamp every line of the ranks' output.
        executable: the ranks' Python (default: the executor's).

    Returns:
        list: the return value of each rank, rank 0 first.

    Raises:
        ValueError: use_gloo, a bad num_proc or start timeout.
        RuntimeError: no active SparkContext, a rank raised (named, with its traceback), a task or executor died.
        TimeoutError: the tasks did not all start within the start timeout.
    """
    from tfring.spark.runner import run as _run
    return _run(fn, args, kwargs, num_proc, start_timeout, use_mpi, use_gloo, extra_mpi_args, env, stdout, stderr,
                verbose, nics, prefix_output_with_timestamp, executable)
