"""Rank side of tfring.runner.run: load the pickled function, run it, write this rank's result."""
import os
import pickle
import sys
import traceback


def main(workdir):
    from mpi4py import MPI  # the world rank names the result file, before (or without) tfring.init()
    rank = MPI.COMM_WORLD.rank
    with open(os.path.join(workdir, "task.pkl"), "rb") as f:
        fn, args, kwargs = pickle.load(f)
    try:
        result = (True, fn(*args, **kwargs))
    except BaseException:  # reported to the caller with the traceback
        result = (False, traceback.format_exc())
    tmp = os.path.join(workdir, ".rank.%d.pkl" % rank)
    import cloudpickle  # a result may be a lambda or a closure, like the function itself
    with open(tmp, "wb") as f:
        cloudpickle.dump(result, f)
    os.replace(tmp, os.path.join(workdir, "rank.%d.pkl" % rank))
    if not result[0]:
        sys.exit(1)


if __name__ == "__main__":
    # Run as a script: drop this file's directory (tfring/runner) from sys.path so `tfring` resolves normally.
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
    from tfring.common import library as _lib
    _lib.prepare_mpi_environment()
    main(sys.argv[1])
