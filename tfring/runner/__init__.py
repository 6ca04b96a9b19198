"""tfringrun: a horovodrun-compatible launcher over the mpirun of the MPI tfring was built with."""


def run(fn, args=(), kwargs=None, np=2, hosts=None, env=None, verbose=False, mpi_args=""):
    """Runs fn(*args, **kwargs) on np ranks and returns each rank's result in rank order (like horovod.run)."""
    from tfring.runner.api import run as _run
    return _run(fn, args, kwargs, np, hosts, env, verbose, mpi_args)
