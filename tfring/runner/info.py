"""tfringrun -v (versions) and -cb/--check-build (what tfring was built with, and whether each binding loads).

The launcher never imports a framework or a binding: what was built comes from build_info.json, the installed
versions from package metadata, and what needs a framework loaded (the TensorFlow version compiled into the op
library, the ops it registers, whether the torch extension loads, the version that then runs) is asked of a child
Python with a deadline. The core and MPI are asked of a child as well, so that a broken build reads as a line of
the report, not as tfringrun's traceback."""
import json
import os
import shutil
import subprocess
import sys
import time

from tfring.common import library as _lib
from tfring.version import __version__

TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly", "tf-nightly-cpu")
PROBE_TIMEOUT = 120  # seconds a child has to load a framework (TensorFlow takes several on a busy machine)
_MARKER = "tfring-check-build-result:"
OP_NAMES = ["HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather", "HorovodGroupedAllgather",
            "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter", "HorovodGroupedReducescatter",
            "HorovodJoin", "HorovodBarrier", "HorovodSize", "HorovodRank", "HorovodLocalSize", "HorovodLocalRank",
            "HorovodProcessSetIncluded"]

# What each child runs (indented into _CHILD's try block); each sets `result`, a JSON-able dict.
_CORE = """\
    import mpi4py
    mpi4py.rc.initialize = mpi4py.rc.finalize = False  # the library's version needs no MPI_Init
    from tfring.common import library, topology
    library.prepare_mpi_environment()
    from mpi4py import MPI
    version = MPI.Get_library_version().replace("\\x00", "")  # Open MPI's string ends with its NUL
    result = {"mpi": version.splitlines()[0].strip(), "nccl": topology.nccl_built(), "cuda": topology.cuda_built()}
"""
_TENSORFLOW = """\
    import tensorflow as tf
    from tensorflow.python.framework import op_def_registry
    from tfring.tensorflow import _library
    built = _library.built_tf_version()  # compiled into the op library itself; loading it registers the ops
    result = {"built": built, "running": tf.__version__,
              "ops": [n for n in %r if op_def_registry.get(n) is not None]}
""" % (OP_NAMES,)
_TORCH = """\
    import torch
    import tfring.torch  # loads the extension
    result = {"running": torch.__version__}
"""
_JAX = """\
    import jax
    import tfring.jax  # loads the extension and registers its XLA FFI targets
    result = {"running": jax.__version__}
"""
_CHILD = """\
import json, sys
sys.path.insert(0, %r)  # the tfring this launcher runs from, whatever the working directory holds
try:
%s
except BaseException as e:  # reported as a line of the report
    result = {"error": " ".join(str(e).split()) or type(e).__name__}
sys.stdout.write("\\n%s" + json.dumps(result) + "\\n")
"""


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
    built = _lib.build_info().get("tensorflow")
    return "tfringrun (tfring %s): TensorFlow %s%s, Open MPI %s" % (
        __version__, _lib.installed_version(*TF_DISTRIBUTIONS) or "not installed",
        " (library built for %s)" % built if built else "", _open_mpi_version())


def _start(body):
    code = _CHILD % (os.path.dirname(_lib.PACKAGE_DIR), body, _MARKER)
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace")


def _answer(proc, deadline):
    """The child's result dict; {"error": ...} when it failed, printed no result or missed the deadline."""
    try:
        out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": "no answer within %d s" % PROBE_TIMEOUT}
    for line in reversed(out.splitlines()):
        if line.startswith(_MARKER):
            return json.loads(line[len(_MARKER):])
    tail = (err or "").strip().splitlines()[-1:]  # e.g. the interpreter crashed while loading a library
    return {"error": "exit code %d%s" % (proc.returncode, (": " + tail[0][:300]) if tail else "")}


def check_build():
    """tfringrun --check-build: the core (MPI, NCCL) and every framework binding, as built and as running."""
    info = _lib.build_info()
    # The children run side by side: each loads its own framework.
    probes = {"core": _start(_CORE)}
    if info.get("tensorflow"):
        probes["tensorflow"] = _start(_TENSORFLOW)
    if info.get("torch"):
        probes["torch"] = _start(_TORCH)
    if info.get("jax"):
        probes["jax"] = _start(_JAX)
    deadline = time.monotonic() + PROBE_TIMEOUT
    answers = {name: _answer(proc, deadline) for name, proc in probes.items()}
    print("\n".join(_core_lines(info, answers["core"]) + _tensorflow_lines(info, answers.get("tensorflow")) +
                    _torch_lines(info, answers.get("torch")) + [_jax_line(info, answers.get("jax")),
                                                                "  MXNet: %s" % _mxnet_line(info)]))


def _core_lines(info, core):
    def yes(key):
        return "unknown" if "error" in core else "yes" if core[key] else "no"
    return ["tfring %s" % __version__,
            "  MPI: %s: %s" % (info.get("mpi", "unknown"),
                               "unknown (the core does not load: %s)" % core["error"] if "error" in core
                               else core["mpi"]),
            "  NCCL: %s    CUDA: %s    Gloo: no" % (yes("nccl"), yes("cuda"))]


def _tensorflow_lines(info, tf):
    if not info.get("tensorflow"):
        return ["  TensorFlow: not built (TensorFlow was not found when tfring was built)"]
    if "error" in tf:  # the installed version from package metadata: TensorFlow may be what fails to load
        return ["  TensorFlow: built for TensorFlow %s (installed: %s), but the op library does not load: %s" % (
            info["tensorflow"], _lib.installed_version(*TF_DISTRIBUTIONS) or "none", tf["error"])]
    return ["  TensorFlow: built for TensorFlow: %s (running %s)" % (tf["built"], tf["running"]),
            "  ops (CPU kernels): " + " ".join(tf["ops"])]


def _torch_lines(info, torch):
    if not info.get("torch"):
        return ["  PyTorch: not built (%s)" % ("torch is installed but tfring was built without it: README, PyTorch"
                                              if _lib.installed_version("torch") else
                                              "torch was not found at build time")]
    if "error" in torch:
        return ["  PyTorch: built for torch %s (installed: %s), but it does not load: %s" % (
            info["torch"], _lib.installed_version("torch") or "none", torch["error"])]
    return ["  PyTorch: built for torch %s (running %s), extension loads" % (info["torch"], torch["running"])]


def _jax_line(info, jax):
    if not info.get("jax"):
        return "  JAX: not built (%s)" % ("jax is installed but tfring was built without it: README, JAX"
                                          if _lib.installed_version("jax") else "jax was not found at build time")
    if "error" in jax:
        return "  JAX: built for jax %s (installed: %s), but it does not load: %s" % (
            info["jax"], _lib.installed_version("jax") or "none", jax["error"])
    return "  JAX: built for jax %s (running %s), XLA FFI handlers registered" % (info["jax"], jax["running"])


def _mxnet_line(info):
    return "built for mxnet %s" % info["mxnet"] if info.get("mxnet") else "not built"
