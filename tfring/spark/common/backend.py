"""Where an estimator's ranks run: Horovod's `horovod.spark.common.backend` (`Backend`, `SparkBackend`).

An estimator given `backend=SparkBackend(num_proc=4, stdout=sys.stdout, prefix_output_with_timestamp=True)` takes
its number of ranks from the backend and runs its job through `backend.run`, so `tfring.spark.run`'s settings
(output streams, timestamps, start timeout, verbosity, NICs, ...) come from there.
"""
__all__ = ["Backend", "SparkBackend", "default_num_proc"]


def default_num_proc():
    """The active SparkContext's defaultParallelism.

    Returns:
        int.

    Raises:
        RuntimeError: no SparkContext is active.
    """
    from pyspark import SparkContext
    context = SparkContext._active_spark_context
    if context is None:
        raise RuntimeError("SparkBackend: num_proc not given and no active SparkContext to take it from")
    return context.defaultParallelism


class Backend:
    """Interface of what runs an estimator's training function on its ranks (Horovod's `Backend`).

    A custom backend runs the ranks somewhere else than the Spark application that fits the estimator.
    """

    def run(self, fn, args=(), kwargs=None, env=None):
        """Runs fn on every rank.

        Args:
            fn: the function.
            args: its positional arguments.
            kwargs: its keyword arguments.
            env: environment variables for the ranks.

        Returns:
            list: fn's result on each rank, in rank order.

        Raises:
            NotImplementedError: a subclass implements it.
        """
        raise NotImplementedError()

    def num_processes(self):
        """The number of ranks.

        Returns:
            int.

        Raises:
            NotImplementedError: a subclass implements it.
        """
        raise NotImplementedError()


class SparkBackend(Backend):
    """Runs the training function with `tfring.spark.run` (Horovod's `SparkBackend`).

    Args:
        num_proc: number of ranks (default: the active SparkContext's defaultParallelism, read now).
        env: environment variables for the ranks. Unlike Horovod, where it replaces the driver's environment, the
            ranks always start from the driver's environment and these are set on top (as `tfring.spark.run` does).
        **kwargs: more arguments of `tfring.spark.run` (stdout, stderr, prefix_output_with_timestamp, verbose,
            start_timeout, extra_mpi_args, nics, executable, use_mpi).

    Raises:
        ValueError: an argument `tfring.spark.run` does not take, or num_proc not a positive integer.
    """

    _RUN_ARGS = {"start_timeout", "use_mpi", "use_gloo", "extra_mpi_args", "stdout", "stderr", "verbose", "nics",
                 "prefix_output_with_timestamp", "executable"}

    def __init__(self, num_proc=None, env=None, **kwargs):
        unknown = sorted(set(kwargs) - self._RUN_ARGS)
        if unknown:
            raise ValueError("SparkBackend: tfring.spark.run takes no argument(s) %s" % ", ".join(unknown))
        if num_proc is not None and (not isinstance(num_proc, int) or num_proc < 1):
            raise ValueError("SparkBackend: num_proc=%r must be a positive integer" % (num_proc,))
        self._num_proc = num_proc or default_num_proc()
        self._env = dict(env or {})
        self._kwargs = kwargs

    def run(self, fn, args=(), kwargs=None, env=None):
        """Runs fn on `num_processes()` Spark tasks as one tfring job (`tfring.spark.run`).

        Args:
            fn: the function.
            args: its positional arguments.
            kwargs: its keyword arguments.
            env: environment variables for the ranks, on top of the backend's env.

        Returns:
            list: fn's result on each rank, in rank order.
        """
        import tfring.spark
        full_env = dict(self._env, **(env or {}))
        return tfring.spark.run(fn, args=args, kwargs=kwargs, num_proc=self._num_proc, env=full_env, **self._kwargs)

    def num_processes(self):
        """The number of ranks.

        Returns:
            int.
        """
        return self._num_proc
