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
    from tfring.common import library as _lib
    built = _lib.build_info().get("tensorflow")
    return "tfringrun (tfring %s): TensorFlow %s%s, Open MPI %s" % (
        tfring.__version__, _lib._installed_tensorflow_version() or "not installed",
        " (library built for %s)" % built if built else "", _open_mpi_version())


def check_build():
    """tfringrun --check-build: the core (MPI, NCCL) and every framework binding, as built and as running."""
    import tfring
    from mpi4py import MPI
    from tfring.common import library as _lib
    info = _lib.build_info()
    print("\n".join([
        "tfring %s" % tfring.__version__,
        "  MPI: %s: %s" % (info.get("mpi", "unknown"), MPI.Get_library_version().splitlines()[0].strip()),
        "  NCCL: %s    CUDA: %s    Gloo: no" % ("yes" if tfring.nccl_built() else "no",
                                                "yes" if tfring.cuda_built() else "no"),
    ] + _tensorflow_lines(info) + _torch_lines(info) + ["  MXNet: %s" % _mxnet_line(info)]))


def _installed(module):
    import importlib.util
    return importlib.util.find_spec(module) is not None


def _tensorflow_lines(info):
    from tfring.common import library as _lib
    if not info.get("tensorflow"):
        return ["  TensorFlow: not built (TensorFlow was not found when tfring was built)"]
    built = _lib.tf_library().tfring_built_tf_version().decode()  # compiled into the library itself
    return ["  TensorFlow: built for TensorFlow: %s (running %s)" % (built, _tf_version()),
            "  ops (CPU kernels): " + " ".join(_registered_ops())]


def _torch_lines(info):
    if not info.get("torch"):
        return ["  PyTorch: not built (%s)" % ("torch is installed but tfring was built without it: README, PyTorch"
                                              if _installed("torch") else "torch was not found at build time")]
    try:
        import torch

        import tfring.torch  # noqa: F401 (loads the extension)
    except ImportError as e:
        return ["  PyTorch: built for torch %s, but it does not load: %s" % (info["torch"], e)]
    return ["  PyTorch: built for torch %s (running %s), extension loads" % (info["torch"], torch.__version__)]


def _mxnet_line(info):
    return "built for mxnet %s" % info["mxnet"] if info.get("mxnet") else "not built"


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
    from tfring.common import library as _lib
    _lib.load()
    return [n for n in _OP_NAMES if op_def_registry.get(n) is not None]
