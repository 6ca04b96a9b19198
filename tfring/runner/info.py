"""tfringrun -v (versions, without loading TensorFlow) and -cb/--check-build (what the library was built with)."""
import os
import shutil
import subprocess
import sys


def mpirun_path():
    here = os.path.join(os.path.dirname(sys.executable), "mpirun")
    return here if os.path.exists(here) else shutil.which("mpirun") or "mpirun"


def _open_mpi_version():
    try:
        out = subprocess.run([mpirun_path(), "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return "not found (%s)" % e
    first = out.strip().splitlines()[0] if out.strip() else "unknown"
    return first.split(")")[-1].strip() if "Open MPI" in first else first  # "mpirun (Open MPI) 5.0.11"


def version_text():
    import tfring
    from tfring import _lib
    built = _lib.build_info().get("tensorflow")
    return "tfringrun (tfring %s): TensorFlow %s%s, Open MPI %s" % (
        tfring.__version__, _lib._installed_tensorflow_version() or "not installed",
        " (library built for %s)" % built if built else "", _open_mpi_version())


def check_build():
    import tfring
    from tfring import _lib
    from mpi4py import MPI
    info = _lib.build_info()
    _, c = _lib.load()
    info["tensorflow"] = c.tfring_built_tf_version().decode()  # compiled into the library itself
    print("\n".join([
        "tfring %s" % tfring.__version__,
        "  built for TensorFlow: %s (running %s)" % (info.get("tensorflow", "unknown"), _tf_version()),
        "  MPI: %s: %s" % (info.get("mpi", "unknown"), MPI.Get_library_version().splitlines()[0].strip()),
        "  NCCL: %s    CUDA: %s    Gloo: no" % ("yes" if tfring.nccl_built() else "no",
                                                "yes" if tfring.cuda_built() else "no"),
        "  ops (CPU kernels): " + " ".join(_registered_ops()),
    ]))


def _tf_version():
    import tensorflow as tf
    return tf.__version__


_OP_NAMES = ["HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather", "HorovodGroupedAllgather",
             "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter", "HorovodGroupedReducescatter",
             "HorovodJoin", "HorovodBarrier", "HorovodSize", "HorovodRank", "HorovodLocalSize", "HorovodLocalRank",
             "HorovodProcessSetIncluded"]


def _registered_ops():
    """The Horovod op names the loaded library really registered (asked from TF's registry)."""
    from tensorflow.python.framework import op_def_registry
    from tfring import _lib
    _lib.load()
    return [n for n in _OP_NAMES if op_def_registry.get(n) is not None]
